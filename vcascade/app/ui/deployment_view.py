"""What the live view shows, gathered from the running deployment: the same metrics scrapes as
``vcascade status`` (:mod:`vcascade.app.status`) and each edge's preview endpoint
(:mod:`vcascade.edge.preview.server`: camera states with reasons, annotated previews, recent lines).

Every edge is reached at its address in the file (``edges.<name>.host`` and ``preview_port``), every metrics
endpoint at :func:`vcascade.app.promconfig.metrics_targets`'s, so one view covers a deployment across hosts. A
component that does not answer is shown as unreachable with the reason; it never stops the view. Rates (fps,
ROIs/s) are counter differences between this overview and the previous one (at least
:data:`MIN_RATE_INTERVAL_S` apart); latency percentiles as in ``vcascade status``. Everything that reaches the
page passes :func:`vcascade.core.redact.redact_url`, so camera credentials never appear.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from vcascade.app.promconfig import metrics_targets
from vcascade.app.status import Scrape, hop_quantiles, only_camera, rate, scrape_all
from vcascade.core.config import Deployment
from vcascade.core.redact import redact_url

EDGE_TIMEOUT_S = 2.0
"""Per request to an edge's preview endpoint, s."""
MIN_RATE_INTERVAL_S = 1.0
"""Shortest interval over which rates are computed; overviews asked for more often reuse the last one, s."""


class EdgeUnreachable(ConnectionError):
    """An edge's preview endpoint did not answer (down, wrong address, no ``preview_port``, refused token).
    Recovery: the view shows the reason and asks again at the next refresh."""


class DeploymentView:
    """The view's data for deployment ``dep``; thread-safe (one per server, shared by its request threads)."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.targets = metrics_targets(dep)
        self._lock = threading.Lock()
        self._before: dict[str, Scrape] = {}
        self._after: dict[str, Scrape] = {}
        self._overview: dict[str, Any] | None = None

    # ------------------------------------------------------------ edges' preview endpoints

    def edge_url(self, edge: str, path: str) -> str:
        """``http://host:preview_port<path>`` of an edge. Raises EdgeUnreachable when it has no preview port."""
        cfg = self.dep.edges[edge]
        if cfg.preview_port is None:
            raise EdgeUnreachable(f"edge {edge} has no preview_port")
        return f"http://{cfg.host}:{cfg.preview_port}{path}"

    def _edge_get(self, edge: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        """GET from an edge's preview endpoint with the token: (status, body, headers). Raises EdgeUnreachable."""
        request = urllib.request.Request(self.edge_url(edge, path))
        if self.dep.ui.token:
            request.add_header("Authorization", f"Bearer {self.dep.ui.token}")
        try:
            with urllib.request.urlopen(request, timeout=EDGE_TIMEOUT_S) as answer:
                return answer.status, answer.read(), dict(answer.headers)
        except urllib.error.HTTPError as exc:
            raise EdgeUnreachable(f"edge {edge}: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise EdgeUnreachable(f"edge {edge}: {getattr(reason, 'strerror', None) or reason}") from None

    def edge_of(self, camera: str) -> str | None:
        """The edge reading ``camera``: from the file, else (added at run time) from the last overview."""
        if camera in self.dep.cameras:
            return self.dep.cameras[camera].edge
        rows = (self._overview or {}).get("cameras", [])
        return next((row["edge"] for row in rows if row["camera"] == camera), None)

    def preview(self, camera: str) -> tuple[bytes, dict[str, str]] | None:
        """The camera's latest annotated JPEG and its headers (frame seq, PTS, boxes); None before the first.

        Raises:
            EdgeUnreachable: the edge did not answer, or does not read the camera.
            KeyError: no edge is known to read ``camera``.
        """
        edge = self.edge_of(camera)
        if edge is None:
            raise KeyError(camera)
        status, body, headers = self._edge_get(edge, f"/preview/{camera}.jpg")
        return None if status == 204 else (body, {k: v for k, v in headers.items() if k.startswith("X-")})

    def recent(self, camera: str) -> dict[str, Any]:
        """The camera's recent result lines and events, and the per-hop latency breakdown of those results.

        Raises:
            EdgeUnreachable, KeyError: as :meth:`preview`.
        """
        edge = self.edge_of(camera)
        if edge is None:
            raise KeyError(camera)
        recent = json.loads(redact_url(self._edge_get(edge, f"/recent/{camera}")[1].decode()))
        return {**recent, "hops": hop_breakdown(recent.get("results", []))}

    def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The recent events (records with ``"kind": "event"``) of every camera whose edge answers, newest
        last, at most ``limit``; each edge keeps them only for cameras being watched."""
        cameras = [row["camera"] for row in (self._overview or self.overview())["cameras"]]
        found: list[dict[str, Any]] = []
        for camera in cameras:
            try:
                found.extend(self.recent(camera).get("events", []))
            except (EdgeUnreachable, KeyError, ValueError):
                continue
        found.sort(key=lambda e: e.get("capture_unix_ms") or e.get("stream_ts_ms") or 0)
        return found[-limit:]

    # ------------------------------------------------------------ the overview

    def overview(self) -> dict[str, Any]:
        """Cameras, brokers, workers and components of the deployment (see :func:`vcascade.app.ui.server`'s
        ``/api/overview``); cached for :data:`MIN_RATE_INTERVAL_S`."""
        with self._lock:
            fresh = self._overview is not None and time.monotonic() - self._overview["time_s"] < MIN_RATE_INTERVAL_S
            if fresh:
                return self._overview
            self._before, self._after = self._after, scrape_all(self.targets)
            states = self._edge_states()
            self._overview = {
                "time_s": time.monotonic(),
                "cameras": self._camera_rows(states),
                "brokers": self._broker_rows(),
                "workers": self._worker_rows(),
                "components": [_component_row(s) for s in self._after.values()],
                "preview_fps": self.dep.ui.preview_fps,
            }
            return self._overview

    def _edge_states(self) -> dict[str, dict[str, Any]]:
        """Per edge: its cameras' states and reasons, or ``{"error": why}`` when its endpoint did not answer."""
        edges = list(self.dep.edges)

        def one(edge: str) -> dict[str, Any]:
            try:
                return json.loads(self._edge_get(edge, "/cameras")[1])
            except (EdgeUnreachable, ValueError) as exc:
                return {"error": str(exc)}

        with ThreadPoolExecutor(max_workers=min(16, len(edges))) as pool:
            return dict(zip(edges, pool.map(one, edges)))

    def _camera_rows(self, states: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per camera of the file and per camera an edge reports (added at run time)."""
        names = {cam: cfg.edge for cam, cfg in self.dep.cameras.items()}
        for edge, answer in states.items():
            names.update({cam: edge for cam in answer.get("cameras", {})})
        return [self._camera_row(edge, cam, states.get(edge, {})) for cam, edge in sorted(names.items())]

    def _camera_row(self, edge: str, camera: str, edge_state: dict[str, Any]) -> dict[str, Any]:
        scrape, before = self._after.get(edge), self._before.get(edge)
        reported = edge_state.get("cameras", {}).get(camera)
        row: dict[str, Any] = {"edge": edge, "camera": camera, "state": "unknown", "reason": None, "error": None,
                               "no_preview_key": no_preview_key(self.dep, edge)}  # fmt: skip
        if reported is not None:
            row.update({k: reported.get(k) for k in ("state", "reason", "detail", "error", "removal")})
        elif "error" in edge_state:
            row.update(state="unreachable", reason="edge", error=edge_state["error"])
        if scrape is None or scrape.error:
            if reported is None and scrape is not None and self.dep.edges[edge].preview_port is None:
                row["error"] = f"edge {edge}: {scrape.error}"  # it does not answer: say why, not that previews are off
            return _redacted(row)
        if reported is None and "error" in edge_state:  # no preview endpoint: the state gauge still tells
            on = [dict(k) for k, v in scrape.series("vcascade_edge_camera_state", camera=camera).items() if v]
            if on:
                row.update(state=on[0]["state"], reason=on[0].get("reason") or None, error=None,
                           previews=edge_state["error"])  # fmt: skip
        drops = {dict(k)["reason"]: int(v) for k, v in scrape.series("vcascade_edge_roi_drops_total", camera=camera).items() if v}
        prev = [only_camera(before, camera)] if before is not None and not before.error else []
        e2e = hop_quantiles(prev, [only_camera(scrape, camera)], "vcascade_edge_hop_seconds").get("end_to_end", [None, None])
        row.update(
            fps=rate(before, scrape, "vcascade_edge_frames_decoded_total", camera=camera),
            rois_per_s=rate(before, scrape, "vcascade_edge_rois_sent_total", camera=camera),
            results_per_s=rate(before, scrape, "vcascade_edge_results_total", camera=camera),
            drops=sum(drops.values()), drops_by_reason=drops,
            e2e_p50_ms=_ms(e2e[0]), e2e_p99_ms=_ms(e2e[1]),
        )  # fmt: skip
        return _redacted(row)

    def _broker_rows(self) -> list[dict[str, Any]]:
        """Per broker: alive, workers, edges, queue depth, in flight, dispatched/s, drops by reason."""
        rows = []
        for name, s in self._after.items():
            if s.target.kind != "broker":
                continue
            row: dict[str, Any] = {"broker": name, "alive": not s.error, "error": s.error}
            if not s.error:
                row.update({
                    key: int(s.total(f"vcascade_broker_{key}"))
                    for key in ("workers", "edges", "queue_depth", "in_flight")
                })
                row["dispatched_per_s"] = rate(self._before.get(name), s, "vcascade_broker_rois_dispatched_total")
                row["drops_by_reason"] = {
                    dict(k)["reason"]: int(v) for k, v in s.series("vcascade_broker_drops_total").items() if v
                }
            rows.append(row)
        return rows

    def _worker_rows(self) -> list[dict[str, Any]]:
        """Per worker: its recognizer, alive, credits, in flight, results/s, and per stage busy % and mean compute
        ms."""
        rows = []
        for name, s in self._after.items():
            if s.target.kind != "worker":
                continue
            row: dict[str, Any] = {"worker": name, "recognizer": s.target.recognizer, "alive": not s.error,
                                   "error": s.error}
            if not s.error:
                prev = self._before.get(name)
                stages = []
                for stage in sorted({dict(k)["stage"] for k in s.series("vcascade_worker_stage_busy_seconds_total")}):
                    busy = rate(prev, s, "vcascade_worker_stage_busy_seconds_total", stage=stage)
                    calls = s.total("vcascade_worker_stage_seconds_count", stage=stage)
                    mean_s = s.total("vcascade_worker_stage_seconds_sum", stage=stage) / calls if calls else None
                    stages.append({"stage": stage, "busy_pct": None if busy is None else 100 * busy, "mean_ms": _ms(mean_s)})
                row.update(
                    credits=int(s.total("vcascade_worker_credits")), in_flight=int(s.total("vcascade_worker_in_flight")),
                    results_per_s=rate(prev, s, "vcascade_worker_results_total"), stages=stages,
                )  # fmt: skip
            rows.append(row)
        return rows


def no_preview_key(dep: Deployment, edge: str) -> str | None:
    """The key that would give ``edge``'s cameras a preview (``edges.<edge>.preview_port``), None when it has one."""
    cfg = dep.edges.get(edge)
    return f"edges.{edge}.preview_port" if cfg is not None and cfg.preview_port is None else None


def hop_breakdown(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hop of the latency account (``latency_ms`` of result lines, in path order), p50 and p99 in ms over
    ``results`` (numpy's linear percentile); hops missing from a line are left out of that hop's numbers."""
    samples: dict[str, list[float]] = {}
    for line in results:
        for hop, ms in (line.get("latency_ms") or {}).items():
            samples.setdefault(hop, []).append(float(ms))
    return [
        {"hop": hop, "p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)), "n": len(v)}
        for hop, v in samples.items()
    ]


def _component_row(s: Scrape) -> dict[str, Any]:
    state = "unreachable" if s.error else "ready" if s.ready else "not ready"
    why = s.error or "; ".join(f"{k.split(':')[-1]}: {v}" for k, v in s.not_ready.items()) or None
    return {"kind": s.target.kind, "name": s.target.name, "address": s.target.address, "state": state, "why": why}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000.0 * seconds


def _redacted(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with every string value passed through :func:`redact_url`."""
    return {k: redact_url(v) if isinstance(v, str) else v for k, v in row.items()}

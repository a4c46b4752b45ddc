"""A live terminal view of a whole deployment, read from its metrics endpoints (``vcascade status FILE``,
:mod:`vcascade.app.commands.status`).

Every component's ``/metrics`` and ``/readyz`` (targets from :func:`vcascade.app.promconfig.metrics_targets`) are
scraped twice, ``interval`` seconds apart; rates (fps, ROIs/s) are the counter differences over that interval
and latency percentiles come from the histogram buckets that filled in it (the whole history when none did),
interpolated like PromQL's ``histogram_quantile``. A component that does not answer is shown as
``unreachable`` with the reason; it never stops the view.
"""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from vcascade.app.promconfig import MetricsTarget, metrics_targets
from vcascade.core.config import load_config

SCRAPE_TIMEOUT_S = 2.0
"""Per request, seconds: an unreachable component costs at most this per refresh."""
Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """One component's samples at ``time_s`` (monotonic): ``samples[name][labels] = value``; ``error`` when it
    could not be read; ``ready``/``not_ready`` from ``/readyz``."""

    target: MetricsTarget
    time_s: float
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)
    error: str | None = None
    ready: bool = False
    not_ready: dict[str, str] = field(default_factory=dict)

    def series(self, name: str, **match: str) -> dict[Labels, float]:
        """The samples of ``name`` whose labels include ``match``."""
        items = self.samples.get(name, {}).items()
        return {k: v for k, v in items if all(dict(k).get(a) == b for a, b in match.items())}

    def total(self, name: str, **match: str) -> float:
        """Sum of the matching samples of ``name`` (0.0 when none)."""
        return sum(self.series(name, **match).values())


def scrape(target: MetricsTarget, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """Read ``target``'s ``/metrics`` and ``/readyz``. Never raises: failures land in ``Scrape.error``."""
    result = Scrape(target, time.monotonic())
    try:
        request, context = target.request("/metrics")
        body = urllib.request.urlopen(request, timeout=timeout_s, context=context).read().decode()
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                result.samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    except (OSError, ValueError) as exc:
        result.error = _reason(exc)
        return result
    try:
        request, context = target.request("/readyz")
        ready = json.loads(urllib.request.urlopen(request, timeout=timeout_s, context=context).read())
        result.ready = bool(ready.get("ready"))
    except urllib.error.HTTPError as exc:  # 503: not ready, with the failing checks
        result.not_ready = _json_or_empty(exc.read()).get("failing", {}) or {"readyz": f"HTTP {exc.code}"}
    except (OSError, ValueError) as exc:
        result.not_ready = {"readyz": _reason(exc)}
    return result


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(getattr(reason, "strerror", None) or reason)


def _json_or_empty(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def scrape_all(targets: list[MetricsTarget], timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, Scrape]:
    """:func:`scrape` every target in parallel; keyed by component name."""
    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        return {s.target.name: s for s in pool.map(lambda t: scrape(t, timeout_s), targets)}


def rate(before: Scrape | None, after: Scrape, name: str, **match: str) -> float | None:
    """Per-second increase of the summed counter ``name`` between two scrapes (None without two readable ones)."""
    if before is None or before.error or after.error or after.time_s <= before.time_s:
        return None
    return max(0.0, after.total(name, **match) - before.total(name, **match)) / (after.time_s - before.time_s)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile (0..1) of a histogram given as cumulative counts by upper bound ``le``.

    Linear interpolation inside the bucket holding the rank, the lowest bucket starting at 0, and the upper
    bound of the highest finite bucket when the rank falls in ``+Inf`` — PromQL's ``histogram_quantile``.
    Returns None for an empty histogram.
    """
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = le, count
    return lower


def hop_quantiles(
    before: list[Scrape], after: list[Scrape], family: str, qs: tuple[float, ...] = (0.5, 0.99)
) -> dict[str, list[float | None]]:
    """Per ``hop`` label, the quantiles ``qs`` (seconds) of histogram ``family`` summed over the scrapes: from
    the buckets filled between ``before`` and ``after``, or from all of ``after`` when nothing new arrived."""
    def merged(scrapes: list[Scrape]) -> dict[str, dict[float, float]]:
        out: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for s in scrapes:
            for labels, value in s.series(f"{family}_bucket").items():
                d = dict(labels)
                out[d.get("hop") or d.get("stage") or "all"][float(d["le"])] += value
        return out

    new, old = merged(after), merged(before)
    result = {}
    for hop, buckets in sorted(new.items()):
        delta = {le: c - old.get(hop, {}).get(le, 0.0) for le, c in buckets.items()}
        use = delta if max(delta.values(), default=0) > 0 else buckets
        result[hop] = [histogram_quantile(q, use) for q in qs]
    return result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def components_table(after: dict[str, Scrape]) -> Table:
    """One row per component: kind, name, address, ready / not ready (why) / unreachable (why)."""
    table = Table(title="components", title_justify="left")
    for col in ("kind", "name", "address", "state"):
        table.add_column(col)
    for s in after.values():
        if s.error:
            state = f"[red]unreachable[/]: {s.error}"
        elif s.ready:
            state = "[green]ready[/]"
        else:
            state = "[yellow]not ready[/]: " + "; ".join(f"{k.split(':')[-1]}: {v}" for k, v in s.not_ready.items())
        table.add_row(s.target.kind, s.target.name, s.target.address, state)
    return table


def cameras_table(before: dict[str, Scrape], after: dict[str, Scrape]) -> Table:
    """Per camera: state (with its reason, :func:`camera_state`), decoded fps, its decoder (``software``, ``cuda``,
    ``qsv``; ``-`` before it opened), detected fps, ROIs/s, results/s, drops (total, by reason), e2e p50/p99."""
    table = Table(title="cameras", title_justify="left")
    for col in ("edge", "camera", "state", "fps", "decoder", "det fps", "ROIs/s", "results/s", "drops", "e2e p50 ms",
                "p99 ms"):
        table.add_column(col, justify="left" if col in ("edge", "camera", "state", "decoder", "drops") else "right")
    for name, s in after.items():
        if s.target.kind != "edge" or s.error:
            continue
        prev = before.get(name)
        cameras = sorted({dict(k)["camera"] for k in s.series("vcascade_edge_frames_decoded_total")})
        for cam in cameras:
            state = camera_state(s, cam)
            drop_series = s.series("vcascade_edge_roi_drops_total", camera=cam)
            drops = {dict(k)["reason"]: v for k, v in drop_series.items() if v}
            prev_cam = [only_camera(prev, cam)] if prev and not prev.error else []
            e2e = hop_quantiles(prev_cam, [only_camera(s, cam)], "vcascade_edge_hop_seconds").get(
                "end_to_end", [None, None])
            table.add_row(
                name, cam, state,
                _num(rate(prev, s, "vcascade_edge_frames_decoded_total", camera=cam)),
                next((dict(k)["decoder"] for k, v in s.series("vcascade_edge_camera_decoder", camera=cam).items() if v),
                     "-"),
                _num(rate(prev, s, "vcascade_edge_frames_detected_total", camera=cam)),
                _num(rate(prev, s, "vcascade_edge_rois_sent_total", camera=cam)),
                _num(rate(prev, s, "vcascade_edge_results_total", camera=cam)),
                f"{int(sum(drops.values()))} " + ",".join(f"{r}={int(v)}" for r, v in sorted(drops.items())),
                _ms(e2e[0]), _ms(e2e[1]),
            )  # fmt: skip
    return table


def camera_state(s: Scrape, camera: str) -> str:
    """The camera's current state from ``vcascade_edge_camera_state`` (the series at 1), with the reason it was
    entered for unless it streams: ``failed (missing_file)``, ``backing_off (connection_refused)``; ``?`` when the
    edge exports no state for it."""
    current = next((dict(k) for k, v in s.series("vcascade_edge_camera_state", camera=camera).items() if v), None)
    if current is None:
        return "?"
    reason = current.get("reason", "")
    return current["state"] if current["state"] == "streaming" or not reason else f"{current['state']} ({reason})"


def only_camera(s: Scrape, camera: str) -> Scrape:
    """A copy of ``s`` keeping only the edge hop histogram series of ``camera``."""
    name = "vcascade_edge_hop_seconds_bucket"
    return Scrape(s.target, s.time_s, {name: s.series(name, camera=camera)})


def brokers_table(before: dict[str, Scrape], after: dict[str, Scrape]) -> Table:
    """Per broker: workers, edges, queued ROIs, in flight, dispatched/s, drops by reason."""
    table = Table(title="brokers", title_justify="left")
    for col in ("broker", "workers", "edges", "queued", "in flight", "dispatched/s", "drops"):
        table.add_column(col, justify="left" if col in ("broker", "drops") else "right")
    for name, s in after.items():
        if s.target.kind != "broker" or s.error:
            continue
        drops = {dict(k)["reason"]: v for k, v in s.series("vcascade_broker_drops_total").items() if v}
        table.add_row(
            name, *(f"{int(s.total(m))}" for m in ("vcascade_broker_workers", "vcascade_broker_edges",
                                                  "vcascade_broker_queue_depth", "vcascade_broker_in_flight")),
            _num(rate(before.get(name), s, "vcascade_broker_rois_dispatched_total")),
            ",".join(f"{r}={int(v)}" for r, v in sorted(drops.items())) or "0",
        )  # fmt: skip
    return table


def workers_table(before: dict[str, Scrape], after: dict[str, Scrape]) -> Table:
    """Per worker: its recognizer, credits, in flight, results/s, mean batch, per stage utilisation % and mean
    compute ms."""
    table = Table(title="workers", title_justify="left")
    stages_col = "stages: busy % / mean ms"
    for col in ("worker", "recognizer", "credits", "in flight", "results/s", "mean batch", stages_col):
        table.add_column(col, justify="left" if col in ("worker", "recognizer", stages_col) else "right")
    for name, s in after.items():
        if s.target.kind != "worker" or s.error:
            continue
        prev = before.get(name)
        count = s.total("vcascade_worker_batch_size_count")
        stages = sorted({dict(k)["stage"] for k in s.series("vcascade_worker_stage_busy_seconds_total")})
        cells = []
        for stage in stages:
            busy = rate(prev, s, "vcascade_worker_stage_busy_seconds_total", stage=stage)
            calls = s.total("vcascade_worker_stage_seconds_count", stage=stage)
            mean = s.total("vcascade_worker_stage_seconds_sum", stage=stage) / calls if calls else None
            cells.append(f"{stage} {_num(None if busy is None else 100 * busy, '{:.0f}')}% / {_ms(mean)}")
        table.add_row(
            name, s.target.recognizer or "-",
            f"{int(s.total('vcascade_worker_credits'))}", f"{int(s.total('vcascade_worker_in_flight'))}",
            _num(rate(prev, s, "vcascade_worker_results_total")),
            _num(s.total("vcascade_worker_batch_size_sum") / count if count else None), "  ".join(cells) or "-",
        )  # fmt: skip
    return table


def identities_table(before: dict[str, Scrape], after: dict[str, Scrape]) -> Table:
    """Per worker of an embedding recognizer (docs/IDENTITY.md): the recognizer (one identity space each),
    identities held, enrolments/s, matches/s, comparisons per ROI, merges and provisional results so far, store
    errors so far, store p99 round trip."""
    table = Table(title="identity spaces", title_justify="left")
    for col in ("worker", "recognizer", "identities", "enrol/s", "match/s", "comparisons/ROI", "merges", "provisional",
                "store errors", "store p99 ms"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("worker", "recognizer") else "right")
    for name, s in after.items():
        if s.target.kind != "worker" or s.error or not s.series("vcascade_identity_gallery_size"):
            continue
        rois = s.total("vcascade_identity_matches_total") + s.total("vcascade_identity_enrolments_total")
        prev = before.get(name)
        p99_s = hop_quantiles([prev] if prev else [], [s], "vcascade_identity_store_seconds", (0.99,))
        table.add_row(
            name, s.target.recognizer or "-", f"{int(s.total('vcascade_identity_gallery_size'))}",
            _num(rate(prev, s, "vcascade_identity_enrolments_total")), _num(rate(prev, s, "vcascade_identity_matches_total")),
            _num(s.total("vcascade_identity_comparisons_total") / rois if rois else None),
            f"{int(s.total('vcascade_identity_merges_total'))}", f"{int(s.total('vcascade_identity_provisional_results_total'))}",
            f"{int(s.total('vcascade_identity_store_errors_total'))}", _ms(p99_s.get("all", [None])[0]),
        )  # fmt: skip
    return table


def latency_table(before: dict[str, Scrape], after: dict[str, Scrape]) -> Table:
    """Latency percentiles per hop (edge account, broker queue, worker hops and stages), ms."""
    table = Table(title="latency (ms)", title_justify="left")
    for col in ("where", "hop", "p50", "p90", "p99"):
        table.add_column(col, justify="left" if col in ("where", "hop") else "right")
    qs = (0.5, 0.9, 0.99)
    for where, kind, family in (
        ("edge", "edge", "vcascade_edge_hop_seconds"), ("broker", "broker", "vcascade_broker_queue_seconds"),
        ("worker", "worker", "vcascade_worker_hop_seconds"), ("stage", "worker", "vcascade_worker_stage_seconds"),
    ):
        now = [s for s in after.values() if s.target.kind == kind and not s.error]
        prev = [before[s.target.name] for s in now if s.target.name in before and not before[s.target.name].error]
        for hop, values in hop_quantiles(prev, now, family, qs).items():
            table.add_row(where, "queue" if hop == "all" else hop, *(_ms(v) for v in values))
    return table


def render(before: dict[str, Scrape], after: dict[str, Scrape], title: str) -> Group:
    """The whole view for two scrape rounds of every component."""
    return Group(
        title, components_table(after), cameras_table(before, after), brokers_table(before, after),
        workers_table(before, after), identities_table(before, after), latency_table(before, after),
    )


def run_status(file: Path, once: bool, interval_s: float, console: Console | None = None) -> int:
    """Show the view for deployment ``file``: one snapshot (``once``) or a live view until Ctrl-C."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    targets = metrics_targets(load_config(file))
    before = scrape_all(targets)
    if once:
        time.sleep(interval_s)
        console.print(render(before, scrape_all(targets), f"vcascade status {file} (rates over {interval_s:g} s)"))
        return 0
    with Live(render({}, before, f"vcascade status {file}"), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval_s)
                after = scrape_all(targets)
                live.update(render(before, after, f"vcascade status {file} — {time.strftime('%H:%M:%S')}"),
                            refresh=True)
                before = after
        except KeyboardInterrupt:
            return 0

"""One edge process, built from its settings: :class:`EdgeProcess` opens its parts in the order they depend on
each other, runs the edge's loop and shuts them down in reverse; :func:`run_edge` is the component's entry point.

The parts (docs/DESIGN.md, "Following one ROI in the code"): the detector and its pool of runs, the camera readers
(:class:`~vcascade.edge.camera_set.CameraSet`) filling the frame slots, the :class:`~vcascade.edge.node.EdgeNode`
(tracking, analytics, ROI policy, crops), the :class:`~vcascade.edge.link.broker_link.BrokerLink` and the way back
(:class:`~vcascade.edge.way_back.WayBack`: identity cache, event updates, preview, output lines to the sinks), the
control socket and the preview server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from vcascade.core.config import EdgeConfig
from vcascade.core.runtime.stop import StopFlag
from vcascade.core.runtime.threads import DetectorThreads, cores_given, detector_threads, set_process_threads
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.telemetry.health import READINESS
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.edge.analytics.events import EventUpdates
from vcascade.edge.camera_set import CameraSet
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader
from vcascade.edge.capture.state import listen_states
from vcascade.edge.capture.url_policy import allow_hosts
from vcascade.edge.control import start_control
from vcascade.edge.detection import Detector
from vcascade.edge.detection import build_detector as open_detector
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.detection.pool import DetectorPool
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.node import EdgeNode
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.privacy.model_file import PrivacyModels
from vcascade.edge.preview.server import serve_previews
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.sinks.queue import QueuedSink, close_sinks
from vcascade.edge.sinks.registry import open_sinks
from vcascade.edge.history.writer import open_history
from vcascade.edge.way_back import WayBack

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5
"""Seconds between two progress reports (snapshots) of a running edge."""
HISTORY_CLOSE_S = 10.0
"""At shutdown, the longest wait for the history writer to write what is queued, s (the rest is dropped, counted)."""


def load_detector(cfg: EdgeConfig, model_dir: str | Path | None) -> tuple[Detector, DetectorThreads]:
    """Find (or, for yolox, download and verify) an edge's configured model and open it with the detector registry
    (:func:`vcascade.edge.detection.build_detector`), with the thread counts the edge's cores give
    (:func:`vcascade.core.runtime.threads.detector_threads`).

    Raises:
        ModelUnavailable, DetectorContractError, ValueError.
    """
    threads = detector_threads(cores_given(cfg.cpus), cfg.detector.instances, cfg.detector.intra_op_threads)
    det = cfg.detector.model_copy(update={"intra_op_threads": threads.intra_op_threads})
    return open_detector(det, ensure_detector_model(det, model_dir)), threads


class EdgeProcess:
    """The parts of one running edge (module docstring), opened by the constructor, started by :meth:`run`.

    Args:
        settings: the edge's settings (:meth:`EdgeSettings.from_deployment`).
        model_dir: where to look for (and download) the detector model.

    Raises:
        vcascade.core.runtime.models.ModelUnavailable: the detector model is missing and cannot be fetched.
        MetricsPortInUse: the metrics port is taken.
        OSError, zmq.ZMQError: a sink's file or endpoint is unusable.
        vcascade.core.transport.security.SecurityError, zmq.ZMQError: the control socket's keys are missing or its
            port is taken.
    """

    def __init__(self, settings: EdgeSettings, model_dir: str | Path | None = None) -> None:
        self.settings, self.name, self.cfg = settings, settings.name, settings.edge
        name = settings.name
        set_process_threads(None, self.cfg.opencv_threads)
        self.detector, self.threads = load_detector(self.cfg, model_dir)
        serve_metrics(self.cfg.metrics_port, component="edge", name=name, settings=settings.metrics,
                      host_names=[self.cfg.host])
        self.ctx = zmq.Context()
        allow_hosts(self.cfg.camera_hosts)  # network cameras only on these hosts (edge.capture.url_policy)
        self.sinks: list[QueuedSink] = open_sinks(self.cfg.sinks, self.ctx, name, settings.security)
        identities = IdentityCache(name)
        self.preview = None if self.cfg.preview_port is None else PreviewHub(
            settings.ui, self.detector.class_names, identities
        )
        self.history = open_history(settings)  # None: history disabled
        self.way_back = WayBack(
            OutputLines(self.sinks), identities, EventUpdates(name, identities), self.preview, self.history
        )
        self.link = BrokerLink(settings, self.ctx, self.way_back)
        self._unlisten = listen_states(name, self.way_back.camera_state)
        self.node = EdgeNode(
            settings, self.detector, self.link, identities, self.preview, self.history, PrivacyModels(model_dir)
        )
        self.slots = FrameSlots()
        self.pool = DetectorPool(
            self.slots, self.detector, self.threads.instances, self.detector.frames_per_run, name, self.node.motion
        )
        self.cameras = CameraSet(name, self.slots, self.node)
        self.control = start_control(settings, self.ctx, self.cameras)  # None without control_port
        self.previews = serve_previews(settings, self.preview, self.cameras.readers) if self.preview else None

    def run(self, stop: StopFlag, report: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Run until the file cameras end (without a control socket) or ``stop`` is set, then drain in-flight ROIs
        for ``drain_timeout_s`` and close everything. ``report`` is called about twice a second with
        :func:`snapshot` dicts, and once with ``final=True``. Returns the final snapshot."""
        _register_readiness(self.name, self.link, self.cameras.readers)
        self.link.start()
        for cam, cam_cfg in self.settings.cameras.items():
            self.cameras.start(cam, cam_cfg)
        self._started = (time.perf_counter(), time.process_time())  # after the model loaded: running time and CPU
        log.info("edge %s: %d cameras, run id %s, %d detector runs at once of %d threads", self.name,
                 self.cameras.open_count(), self.node.run_id, self.threads.instances,
                 self.threads.intra_op_threads)  # fmt: skip
        self.pool.start()
        try:
            self._loop(stop, report)
        finally:
            self._shut_down(report)
        final = self.snapshot(final=True)
        if report:
            report(final)
        return final

    def snapshot(self, final: bool = False) -> dict[str, Any]:
        """The edge's progress and books now (:func:`snapshot`)."""
        snap = snapshot(self.name, self.link, self.cameras.readers(), self._started, final, self.node, self.sinks)
        if self.history is not None:
            snap["history"] = self.history.stats()
        return snap

    def _loop(self, stop: StopFlag, report: Callable[[dict[str, Any]], None] | None) -> None:
        last_report_s = time.perf_counter()
        while not stop.is_set():
            if self.control is not None:
                self.control.apply_pending()
            detected = self.pool.next(timeout_s=0.1)
            if detected:
                self.node.handle(detected)
                self.slots.release([item.frame for item in detected])
            elif self.slots.finished() and self.control is None:
                break  # no control socket: the edge ends with its files
            elif self.slots.finished():
                stop.wait(0.1)  # no camera now: wait for the control socket
            if report and time.perf_counter() - last_report_s >= REPORT_INTERVAL_S:
                last_report_s = time.perf_counter()
                report(self.snapshot())

    def _shut_down(self, report: Callable[[dict[str, Any]], None] | None) -> None:
        READINESS.remove(f"edge:{self.name}:")
        self.pool.stop()
        self.cameras.stop_all()
        if self.control is not None:
            self.control.close()
        self.link.drain(self.cfg.drain_timeout_s, on_tick=(lambda: report(self.snapshot())) if report else None)
        self.cameras.join_all()  # a capture thread still inside FFmpeg at interpreter exit aborts the process
        self._unlisten()
        if self.history is not None:
            self.history.close(HISTORY_CLOSE_S)
        if self.previews is not None:
            self.previews.shutdown()
        close_sinks(self.sinks)
        self.ctx.term()


def run_edge(
    settings: EdgeSettings,
    stop: StopFlag,
    report: Callable[[dict[str, Any]], None] | None = None,
    model_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run the edge ``settings`` describe until its file cameras end or ``stop`` is set, then drain in-flight ROIs
    (:class:`EdgeProcess`); ``report`` gets :func:`snapshot` dicts about twice a second and the final one.

    Returns:
        The final snapshot.

    Raises:
        Those of :class:`EdgeProcess` (model unavailable, metrics port taken, control socket keys or port).
    """
    return EdgeProcess(settings, model_dir).run(stop, report)


def _register_readiness(name: str, link: BrokerLink, readers: Callable[[], list[CameraReader]]) -> None:
    """``/readyz`` of this edge: at least one broker link alive, and at least one camera streaming or a file
    camera not yet ended (:mod:`vcascade.core.telemetry.health`)."""

    def brokers() -> tuple[bool, str]:
        up = any(state["up"] for state in link.broker_states().values())
        return up, "" if up else "no broker alive"

    def cameras() -> tuple[bool, str]:
        now = readers()
        ok = any(r.state == "streaming" or (not r.live and r.state not in ("ended", "failed")) for r in now)
        return ok, "" if ok else "no camera streaming: " + ", ".join(f"{r.camera}={r.state}" for r in now)

    READINESS.add_check(f"edge:{name}:brokers", brokers)
    READINESS.add_check(f"edge:{name}:cameras", cameras)


def snapshot(
    name: str, link: BrokerLink, readers: list[CameraReader], started: tuple[float, float], final: bool,
    node: EdgeNode | None = None, sinks: Sequence[QueuedSink] = (),
) -> dict[str, Any]:
    """Progress and accounting of one edge: per camera its state, the ``reason`` of its last state change, its
    ``fault`` and ``detail`` (the latest fault since it last streamed, None after), the ``error`` that failed it
    (None unless failed or ended early), frames, skipped (newest-frame slot), sent, results, drops,
    end-to-end p50/p99 (ms) and, given ``node``, frames detected, frames ``still`` (kept from the detector by the
    camera's motion gate) and frame age p50/p99 (ms,
    :meth:`CameraTracking.frame_age_stats`); per broker ``up``, ``in_flight``, ``sent`` and ``silent_s``
    (:meth:`BrokerLink.broker_states`); per sink (by label, e.g. ``jsonl[0]``) the lines written by status and
    lost by reason, ``queued`` and ``error`` (:meth:`QueuedSink.stats`); ``elapsed_s`` and ``cpu_s``, the running time and the process's CPU
    time (all threads) since ``started`` = (``time.perf_counter()``, ``time.process_time()``), s."""
    cameras = {}
    tallies = link.tally_copy()
    for reader in readers:
        tally = tallies[reader.camera]
        e2e = np.fromiter(tally.end_to_end_ms, float) if tally.end_to_end_ms else np.zeros(0)
        cameras[reader.camera] = {
            "state": reader.state,
            "reason": reader.reason,
            "fault": reader.fault,
            "detail": reader.detail,
            "error": reader.error,
            "frames": reader.frames,
            "rate_skipped": reader.rate_skipped,
            "fps": None if (fps := reader.decode_fps) is None else round(fps, 2),
            "decoder": reader.decoder,
            "decoder_fallbacks": dict(reader.decoder_fallbacks),
            "reconnects": reader.reconnects,
            "blocked_s": round(reader.blocked_s, 3),
            "corrupt_frames": reader.corrupt_frames,
            "losses": dict(reader.losses),
            "sent": tally.sent,
            "results": tally.results,
            "drops": dict(tally.drops),
            "p50_ms": float(np.percentile(e2e, 50)) if len(e2e) else None,
            "p99_ms": float(np.percentile(e2e, 99)) if len(e2e) else None,
            "skipped": reader.slots.skipped.get(reader.camera, 0),
        }
        if node is not None:
            cameras[reader.camera].update(node.camera_stats(reader.camera))
        if reader.removal is not None:  # removed at run time: ``closed`` once its books are final
            cameras[reader.camera]["removal"] = reader.removal
    return {
        "component": "edge", "name": name, "final": final,
        "elapsed_s": time.perf_counter() - started[0], "cpu_s": time.process_time() - started[1], "cameras": cameras,
        "brokers": link.broker_states(), "sinks": {sink.label: sink.stats() for sink in sinks},
    }

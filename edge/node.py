"""The edge process: cameras -> detector -> tracker -> ROI policy -> crops -> broker link -> sinks.

Follow one ROI: a :class:`~edge.capture.source.CameraReader` decodes a frame into the :class:`~edge.capture.frames.FrameSlots`;
one of the :class:`~edge.detection.pool.DetectorPool`'s threads takes it and runs the detector (as many runs at once
as the edge has cores, :mod:`vcascade.core.runtime.threads`); :func:`run_edge`'s loop gets the detections back in take
order and :meth:`EdgeNode.handle` tracks them (:mod:`vcascade.edge.selection.tracking`), turns the tracks of a camera with
``analytics`` into line, zone and dwell events (:mod:`vcascade.edge.analytics`), lets the ROI policy select the ones
worth sending (:mod:`vcascade.edge.selection.roi_policy`: one :class:`~vcascade.edge.selection.roi_selection.RoiSelection` per frame;
the others get a ``tracked`` line with their track's cached identity, :mod:`vcascade.edge.selection.identity_cache`), crops,
JPEG-encodes and heads each selected row (:mod:`vcascade.edge.selection.roi`) and submits it to the
:class:`~edge.link.broker_link.BrokerLink`, which sends it to a broker, receives the result, closes the latency account
(:mod:`vcascade.edge.link.account`) and writes the sinks.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from vcascade.core.config import CameraConfig, Deployment, RoiConfig, RoiPolicyConfig
from vcascade.core.detections import Detections
from vcascade.core.telemetry.health import READINESS
from vcascade.core.runtime.stop import StopFlag
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.core.runtime.threads import DetectorThreads, cores_given, detector_threads, set_process_threads
from vcascade.edge.link.account import PendingRoi, tracked_record
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.analytics.events import EventUpdates
from vcascade.edge.preview.annotate import camera_geometry
from vcascade.edge.camera_set import CameraSet
from vcascade.edge.capture.state import camera_state_record, listen_states
from vcascade.edge.control import start_control
from vcascade.edge.detection.pool import DetectedFrame, DetectorPool, detect_frames
from vcascade.edge.detection import Detector
from vcascade.edge.detection import build_detector as open_detector
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.metrics import EdgeTelemetry
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.preview.server import serve_previews
from vcascade.edge.selection.roi import crop_pixels, encode_jpeg, roi_header
from vcascade.edge.selection.roi_policy import RoiPolicy
from vcascade.edge.selection.roi_selection import RoiSelection
from vcascade.edge.selection.routing import ClassRouter
from vcascade.edge.sinks.queue import QueuedSink, close_sinks, write_all
from vcascade.edge.sinks.registry import open_sinks
from vcascade.edge.capture.source import CameraReader
from vcascade.edge.selection.tracking import CameraTracker

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5
FRAME_AGE_WINDOW = 2000
"""Frames per camera over which the snapshot's frame age percentiles are computed."""


class CameraTracking:
    """The tracking state of one camera: its ByteTrack tracker, its ROI policy, its analytics, the lines and zones
    its previews show."""

    def __init__(
        self, policy_cfg: RoiPolicyConfig, roi_cfg: RoiConfig, router: ClassRouter | None = None,
        analytics: CameraAnalytics | None = None, camera_cfg: CameraConfig | None = None,
    ) -> None:
        """``policy_cfg``: the camera's ROI policy; ``roi_cfg``: its edge's ``roi`` (minimum size, padding);
        ``router``: its routes (None: every ROI for any recognizer); ``analytics``: its lines and zones (None:
        none); ``camera_cfg``: its settings (the lines and zones its previews draw)."""
        self.geometry = camera_geometry(camera_cfg)
        self.tracker = CameraTracker(policy_cfg.tracker)
        self.analytics = analytics
        self.policy = RoiPolicy(policy_cfg, roi_cfg.min_size_px, roi_cfg.padding_px, router)
        self.emit_tracked = policy_cfg.emit_tracked
        self.detected = 0
        self.frame_ages_ms: deque[float] = deque(maxlen=FRAME_AGE_WINDOW)

    def frame_age_stats(self) -> dict[str, Any]:
        """``detected`` (frames detected) and frame age p50/p99 in ms over the last ``FRAME_AGE_WINDOW`` frames.

        Frame age: from the frame's capture (``Frame.capture_s``) to the start of its detection; what a live
        camera's newest-frame slot keeps bounded.
        """
        ages = np.fromiter(self.frame_ages_ms, float)
        return {
            "detected": self.detected,
            "frame_age_p50_ms": float(np.percentile(ages, 50)) if len(ages) else None,
            "frame_age_p99_ms": float(np.percentile(ages, 99)) if len(ages) else None,
        }


class EdgeNode:
    """Tracking and ROI creation for the frames of one edge process, after detection (runs on the edge's loop
    thread, which also applies camera changes, so no camera's state is touched by two threads).

    ``identities`` must be among the sinks ``link`` writes to, so that results reach the identity cache; so must
    ``preview`` (the live view's previews, :mod:`vcascade.edge.preview.hub`; None: no previews), when given.
    """

    def __init__(
        self, name: str, dep: Deployment, detector: Detector, link: BrokerLink, identities: IdentityCache,
        preview: PreviewHub | None = None,
    ) -> None:
        self.name, self.cfg, self.detector, self.link = name, dep.edges[name], detector, link
        self.preview = preview
        self._dep = dep
        self.telemetry = EdgeTelemetry(name)
        self.identities = identities
        self.run_id = uuid.uuid4().hex[:8]
        self._counter = 0
        self._cameras = {
            cam: CameraTracking(
                dep.roi_policy_of(cam), self.cfg.roi, ClassRouter.for_camera(dep, cam, detector.class_names),
                self._analytics(cam, cam_cfg), cam_cfg,
            )
            for cam, cam_cfg in dep.cameras_of(name).items()
        }

    def _analytics(self, camera: str, cam_cfg: CameraConfig) -> CameraAnalytics | None:
        """The camera's lines and zones, publishing their events through the link (None: no ``analytics``)."""
        if cam_cfg.analytics is None:
            return None
        return CameraAnalytics(
            self.name, camera, cam_cfg.analytics, self.detector.class_names, self.identities, self.link.publish
        )

    def camera_stats(self, camera: str) -> dict[str, Any]:
        """Frames detected and frame age percentiles of one camera (:meth:`CameraTracking.frame_age_stats`);
        empty for a camera this node does not track."""
        cam = self._cameras.get(camera)
        return cam.frame_age_stats() if cam is not None else {}

    def add_camera(self, camera: str, cam_cfg: CameraConfig) -> None:
        """Start tracking a camera added at run time (detector thread), before its first frame: its own ROI policy
        or the edge's, and its own routes or the edge's (:meth:`Deployment.routes_for`)."""
        policy = cam_cfg.roi_policy or self.cfg.roi.policy
        router = ClassRouter(self._dep.routes_for(self.name, cam_cfg), self.detector.class_names)
        self._cameras[camera] = CameraTracking(
            policy, self.cfg.roi, router, self._analytics(camera, cam_cfg), cam_cfg
        )
        self.link.add_camera(camera)

    def remove_camera(self, camera: str) -> None:
        """Forget a removed camera's tracks and identities (detector thread), after its last frame."""
        cam = self._cameras.pop(camera, None)
        if cam is not None and cam.analytics is not None:
            cam.analytics.close()
        self.identities.retain(camera, set())
        if self.preview is not None:
            self.preview.forget(camera)

    def process_batch(self, frames: list[Frame]) -> int:
        """Detect on frames of different cameras in one batched detector call on this thread, then
        :meth:`handle`. Returns the number of ROIs submitted."""
        return self.handle(detect_frames(self.detector, frames))

    def handle(self, detected: list[DetectedFrame]) -> int:
        """Track and send ROIs for frames after detection, in order (:meth:`handle_detections`).

        A frame the detector rejected (unsupported shape or dtype) is counted as corrupt (``bad_image``) and
        skipped. A camera is never forgotten while one of its frames is in detection (frames stay held in the
        slots until released after this call), so every frame's camera is still tracked here.

        Returns:
            The number of ROIs submitted.
        """
        submitted = 0
        for item in detected:
            frame = item.frame
            if item.detections is None:
                log.warning("edge %s: camera %s: frame %d skipped: %s", self.name, frame.camera, frame.seq, item.error)
                self.telemetry.frame_rejected(frame.camera)
                continue
            submitted += self.handle_detections(frame, item.detections, item.start_s, item.end_s)
        return submitted

    def _class_name(self, class_id: int) -> str:
        names = self.detector.class_names
        return names[class_id] if 0 <= class_id < len(names) else str(class_id)

    def handle_detections(
        self, frame: Frame, detections: Detections, detect_start_s: float, detect_end_s: float
    ) -> int:
        """Track one frame's detections, submit the ROIs the policy sends, write ``tracked`` lines for the rest.

        Args:
            frame: the frame the detections belong to.
            detections: its detections, boxes in original-frame pixels.
            detect_start_s, detect_end_s: ``perf_counter()`` seconds around its detection (latency account).

        Returns:
            The number of ROIs submitted.
        """
        self.telemetry.frame_detected(frame.camera, len(detections))
        cam = self._cameras[frame.camera]
        cam.detected += 1
        cam.frame_ages_ms.append((detect_start_s - frame.capture_s) * 1000.0)
        tracked = cam.tracker.update(detections, frame.stream_ts_ms)
        alive = cam.tracker.alive_ids()
        if cam.analytics is not None:  # before the identity cache forgets the dropped tracks
            cam.analytics.process(frame, tracked, alive)
        cam.policy.retain(alive)
        self.identities.retain(frame.camera, alive)
        if self.preview is not None and self.preview.due(frame.camera, now_s := time.monotonic()):
            self.preview.offer(frame, tracked, now_s, cam.geometry)  # only while someone watches this camera
        selection = cam.policy.decide(tracked, frame.stream_ts_ms, frame.image.shape[:2], self.link.shed_level)
        self._suppressed(frame, selection, cam.emit_tracked)
        return self._submit(frame, selection, detect_start_s, detect_end_s)

    def _suppressed(self, frame: Frame, selection: RoiSelection, emit_tracked: bool) -> None:
        """Count the detections the policy did not send, per reason; write a ``tracked`` line for each followed one
        (:meth:`RoiSelection.followed`) with its track's cached identity."""
        for reason, count in selection.suppressed_counts().items():
            self.telemetry.rois_suppressed(frame.camera, reason, count)
        if not emit_tracked:
            return
        followed = selection.followed()
        for row in range(len(followed)):
            track_id = int(followed.track_id[row])
            identity = self.identities.get(frame.camera, track_id) if track_id >= 0 else None
            class_id = int(followed.class_id[row])
            record = tracked_record(
                frame, followed.xyxy[row], class_id, float(followed.score[row]), track_id, identity,
                self._class_name(class_id),
            )
            self.link.publish(record)
            self.telemetry.tracked_line(frame.camera)

    def _submit(self, frame: Frame, selection: RoiSelection, detect_start_s: float, detect_end_s: float) -> int:
        """Crop, encode and submit the ROI of each sent row of ``selection``; returns the number submitted."""
        for row in range(len(selection)):
            payload = encode_jpeg(crop_pixels(frame.image, selection.crop_xyxy[row]), self.cfg.roi.jpeg_quality)
            self._counter += 1
            roi = roi_header(frame, selection, row, f"{self.name}-{self.run_id}-{self._counter}")
            pending = PendingRoi(
                roi, frame.capture_s, detect_start_s, detect_end_s, encoded_s=time.perf_counter(),
                send_reason=str(selection.send_reason[row]), class_name=self._class_name(roi.class_id),
            )
            self.link.submit(pending, payload)
        return len(selection)


def build_detector(dep: Deployment, name: str, model_dir: str | Path | None) -> tuple[Detector, DetectorThreads]:
    """Find (or, for yolox, download and verify) the configured model and open it with the detector registry
    (:func:`vcascade.edge.detection.build_detector`), with the thread counts the edge's cores give
    (:func:`vcascade.core.runtime.threads.detector_threads`). Raises ModelUnavailable, DetectorContractError, ValueError."""
    cfg = dep.edges[name]
    threads = detector_threads(cores_given(cfg.cpus), cfg.detector.instances, cfg.detector.intra_op_threads)
    det = cfg.detector.model_copy(update={"intra_op_threads": threads.intra_op_threads})
    return open_detector(det, ensure_detector_model(det, model_dir)), threads


def run_edge(
    dep: Deployment,
    name: str,
    stop: StopFlag,
    report: Callable[[dict[str, Any]], None] | None = None,
    model_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run one edge until its file cameras end or ``stop`` is set, then drain in-flight ROIs.

    Args:
        dep: the validated deployment.
        name: key of this edge under ``edges``.
        stop: set to stop reading; in-flight ROIs still get ``drain_timeout_s`` to come back.
        report: called about twice a second with :func:`snapshot` dicts, and once with ``final=True``.
        model_dir: where to look for (and download) the detector model.

    Returns:
        The final snapshot.

    Raises:
        vcascade.core.runtime.models.ModelUnavailable: the detector model is missing and cannot be fetched.
        MetricsPortInUse: the metrics port is taken.
        vcascade.core.transport.security.SecurityError, zmq.ZMQError: the control socket's keys are missing or its port is taken.
    """
    cfg = dep.edges[name]
    set_process_threads(None, cfg.opencv_threads)
    detector, threads = build_detector(dep, name, model_dir)
    serve_metrics(cfg.metrics_port, component="edge", name=name, settings=dep.metrics, host_names=[cfg.host])
    ctx = zmq.Context()
    sinks = open_sinks(cfg.sinks, ctx, name)
    identities = IdentityCache(name)
    preview = None if cfg.preview_port is None else PreviewHub(dep.ui, detector.class_names, identities)
    updates = EventUpdates(name, identities, sinks)  # after the identity cache: it reads what results put there
    link = BrokerLink(name, dep, ctx, [*sinks, identities, updates, *([preview] if preview else [])])
    unlisten = listen_states(name, lambda camera, step: write_all(sinks, camera_state_record(camera, step)))
    node = EdgeNode(name, dep, detector, link, identities, preview)
    slots = FrameSlots()
    pool = DetectorPool(slots, detector, threads.instances, detector.frames_per_run, name)
    cameras = CameraSet(name, slots, node)
    control = start_control(name, dep, ctx, cameras)  # None without control_port: the edge ends with its files
    previews = serve_previews(name, dep, preview, cameras.readers) if preview else None
    _register_readiness(name, link, cameras.readers)
    link.start()
    for cam, cam_cfg in dep.cameras_of(name).items():
        cameras.start(cam, cam_cfg)
    started = (time.perf_counter(), time.process_time())  # after the model loaded: the running time and CPU
    last_report_s = started[0]

    def current(final: bool) -> dict[str, Any]:
        return snapshot(name, link, cameras.readers(), started, final, node=node, sinks=sinks)

    log.info("edge %s: %d cameras, run id %s, %d detector runs at once of %d threads", name,
             cameras.open_count(), node.run_id, threads.instances, threads.intra_op_threads)  # fmt: skip
    pool.start()
    try:
        while not stop.is_set():
            if control is not None:
                control.apply_pending()
            detected = pool.next(timeout_s=0.1)
            if detected:
                node.handle(detected)
                slots.release([item.frame for item in detected])
            elif slots.finished() and control is None:
                break
            elif slots.finished():
                stop.wait(0.1)  # no camera now: wait for the control socket
            if report and time.perf_counter() - last_report_s >= REPORT_INTERVAL_S:
                last_report_s = time.perf_counter()
                report(current(final=False))
    finally:
        READINESS.remove(f"edge:{name}:")
        pool.stop()
        cameras.stop_all()
        if control is not None:
            control.close()
        if report:
            link.drain(
                cfg.drain_timeout_s,
                on_tick=lambda: report(current(final=False)),
            )
        else:
            link.drain(cfg.drain_timeout_s)
        cameras.join_all()  # a capture thread still inside FFmpeg at interpreter exit aborts the process
        unlisten()
        if previews is not None:
            previews.shutdown()
        close_sinks(sinks)
        ctx.term()
    final = current(final=True)
    if report:
        report(final)
    return final


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
    end-to-end p50/p99 (ms) and, given ``node``, frames detected and frame age p50/p99 (ms,
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

"""The edge process: cameras -> detector -> crops -> broker link -> sinks.

Follow one ROI: a :class:`~edge.source.CameraReader` decodes a frame into the :class:`~edge.frames.FrameSlots`;
:func:`run_edge`'s loop takes it, runs the detector (:meth:`EdgeNode.process`), crops and JPEG-encodes each
kept detection (:mod:`edge.roi`) and submits it to the :class:`~edge.link.BrokerLink`, which sends it to a
broker, receives the result, closes the latency account (:mod:`edge.account`) and writes the sinks.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import zmq

from edge import metrics
from edge.account import PendingRoi
from edge.detector import YoloxDetector
from edge.frames import Frame, FrameSlots
from edge.link import BrokerLink
from edge.roi import encode_jpeg, select_crops
from edge.sinks import open_sinks
from edge.source import CameraReader
from vcascade import wire
from vcascade.coco import COCO_CLASSES
from vcascade.components import StopFlag
from vcascade.config import Deployment
from vcascade.models import ensure_detector_model
from vcascade.telemetry import serve_metrics

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5


class EdgeNode:
    """Detection and ROI creation for the frames of one edge process (runs on the detector thread)."""

    def __init__(self, name: str, dep: Deployment, detector: YoloxDetector, link: BrokerLink) -> None:
        self.name, self.cfg, self.detector, self.link = name, dep.edges[name], detector, link
        self.run_id = uuid.uuid4().hex[:8]
        self._counter = 0

    def process(self, frame: Frame) -> int:
        """Detect on one frame and submit an ROI per kept detection. Returns the number of ROIs submitted."""
        detect_start_s = time.perf_counter()
        detections = self.detector(frame.image)
        detect_end_s = time.perf_counter()
        metrics.FRAMES_DETECTED.labels(self.name, frame.camera).inc()
        metrics.DETECTIONS.labels(self.name, frame.camera).inc(len(detections))
        crops = select_crops(frame.image, detections, self.cfg.roi)
        for crop in crops:
            payload = encode_jpeg(crop.pixels, self.cfg.roi.jpeg_quality)
            self._counter += 1
            i = crop.index
            roi = wire.Roi(
                roi_id=f"{self.name}-{self.run_id}-{self._counter}", camera=frame.camera, frame_seq=frame.seq,
                stream_ts_ms=frame.stream_ts_ms, capture_unix_ms=frame.capture_unix_ms,
                xyxy=tuple(float(v) for v in detections.xyxy[i]), crop_xyxy=crop.crop_xyxy,
                class_id=int(detections.class_id[i]), score=float(detections.score[i]),
            )
            pending = PendingRoi(roi, frame.capture_s, detect_start_s, detect_end_s, encoded_s=time.perf_counter())
            self.link.submit(pending, payload)
        return len(crops)


def build_detector(dep: Deployment, name: str, model_dir: str | Path | None) -> YoloxDetector:
    """Find (or download and verify) the configured model and open it. Raises ModelUnavailable."""
    det = dep.edges[name].detector
    path = ensure_detector_model(det, model_dir)
    class_ids = None if det.classes is None else {COCO_CLASSES.index(c) for c in det.classes}
    return YoloxDetector(
        path, input_size=det.input_size, score_threshold=det.score_threshold, nms_iou=det.nms_iou,
        class_ids=class_ids, intra_op_threads=det.intra_op_threads,
    )


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
        vcascade.models.ModelUnavailable: the detector model is missing and cannot be fetched.
        MetricsPortInUse: the metrics port is taken.
    """
    cfg = dep.edges[name]
    cv2.setNumThreads(cfg.opencv_threads)
    detector = build_detector(dep, name, model_dir)
    serve_metrics(cfg.metrics_port)
    ctx = zmq.Context()
    sinks = open_sinks(cfg.sinks, ctx)
    link = BrokerLink(name, dep, ctx, sinks)
    node = EdgeNode(name, dep, detector, link)
    slots, readers_stop = FrameSlots(), threading.Event()
    readers = [CameraReader(name, cam, cam_cfg, slots, readers_stop) for cam, cam_cfg in dep.cameras_of(name).items()]
    link.start()
    for reader in readers:
        reader.start()
    started_s = last_report_s = time.perf_counter()
    log.info("edge %s: %d cameras, run id %s", name, len(readers), node.run_id)
    try:
        while not stop.is_set():
            frame = slots.take(timeout_s=0.1)
            if frame is not None:
                node.process(frame)
            elif slots.finished():
                break
            if report and time.perf_counter() - last_report_s >= REPORT_INTERVAL_S:
                last_report_s = time.perf_counter()
                report(snapshot(name, link, readers, started_s, final=False))
    finally:
        readers_stop.set()
        if report:
            link.drain(cfg.drain_timeout_s, on_tick=lambda: report(snapshot(name, link, readers, started_s, False)))
        else:
            link.drain(cfg.drain_timeout_s)
        for sink in sinks:
            sink.close()
        ctx.term()
    final = snapshot(name, link, readers, started_s, final=True)
    if report:
        report(final)
    return final


def snapshot(name: str, link: BrokerLink, readers: list[CameraReader], started_s: float, final: bool) -> dict[str, Any]:
    """Progress and accounting of one edge: per camera frames, sent, results, drops, end-to-end p50/p99 (ms);
    per broker ``up``, ``in_flight``, ``sent`` and ``silent_s`` (:meth:`BrokerLink.broker_states`)."""
    cameras = {}
    tallies = link.tally_copy()
    for reader in readers:
        tally = tallies[reader.camera]
        e2e = np.fromiter(tally.end_to_end_ms, float) if tally.end_to_end_ms else np.zeros(0)
        cameras[reader.camera] = {
            "state": reader.state,
            "error": reader.error,
            "frames": reader.frames,
            "sent": tally.sent,
            "results": tally.results,
            "drops": dict(tally.drops),
            "p50_ms": float(np.percentile(e2e, 50)) if len(e2e) else None,
            "p99_ms": float(np.percentile(e2e, 99)) if len(e2e) else None,
        }
    return {
        "component": "edge", "name": name, "final": final,
        "elapsed_s": time.perf_counter() - started_s, "cameras": cameras,
        "brokers": link.broker_states(),
    }

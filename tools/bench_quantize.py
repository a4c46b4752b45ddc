#!/usr/bin/env python3
"""The int8 YOLOX detector (``vcascade quantize``, issue 32) against the fp32 one, in the same run, on the footage.

The int8 copy is made into a temporary folder exactly as ``vcascade quantize`` makes it (calibrated on
``--calibration-frames`` frames spread over bikes.mp4); then every frame of the clip is detected by both models
(ONNX Runtime, 1 intra-op thread each, alternating frame by frame so load on the machine moves both alike), with
the edge's thresholds (score 0.3, NMS IoU 0.45, all 80 classes). Reported:

* ``agreement``: fp32 boxes matched one-to-one by an int8 box of the same class at IoU >= 0.5 (greedy, best IoU
  first: ``vcascade.edge.detection.agreement``, the check ``vcascade quantize`` makes), over all fp32 boxes; ``precision``: the same matches over all int8 boxes;
* CPU per frame of each (``time.thread_time``, preprocessing, session run and decoding) and ``speedup`` = fp32 / int8.

Goal: agreement >= 0.95 with a speed-up. The calibration frames are part of the frames compared (the benchmark
has one clip); ``--calibration-frames`` small keeps that share small.

Usage: ``python -m tools.bench_quantize [--model-dir DIR] [--frames 250] [--calibration-frames 32]
[--float-stride 32] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench_motion import VIDEO
from tools.report import finish
from vcascade.app.commands.quantize import calibration_frames
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.agreement import matched_boxes
from vcascade.edge.detection.quantize import FLOAT_STRIDE, quantize_yolox

GOAL_AGREEMENT = 0.95


def compare(fp32_path: Path, int8_path: Path, frames: list[np.ndarray]) -> dict[str, Any]:
    """Both models over ``frames`` (module docstring)."""
    cfg = YoloxDetectorConfig(intra_op_threads=1)
    fp32, int8 = build_detector(cfg, fp32_path), build_detector(cfg, int8_path)
    boxes = {"fp32": 0, "int8": 0}
    cpu_s = {"fp32": 0.0, "int8": 0.0}
    matched = 0
    for image in frames:
        found = {}
        for name, detector in (("fp32", fp32), ("int8", int8)):
            t0 = time.thread_time()
            found[name] = detector(image)
            cpu_s[name] += time.thread_time() - t0
            boxes[name] += len(found[name])
        matched += matched_boxes(found["fp32"], found["int8"])
    n = len(frames)
    return {
        "frames": n, "boxes": boxes, "matched": matched,
        "agreement": round(matched / max(boxes["fp32"], 1), 4),
        "precision": round(matched / max(boxes["int8"], 1), 4),
        "cpu_ms_per_frame": {name: round(s / n * 1000.0, 3) for name, s in cpu_s.items()},
        "speedup": round(cpu_s["fp32"] / max(cpu_s["int8"], 1e-9), 3),
    }


def make_int8_copy(fp32_path: Path, out: Path, video: str | Path, frames: int,
                   float_stride: int = FLOAT_STRIDE) -> Path:  # fmt: skip
    """Write the int8 copy of ``fp32_path`` to ``out`` as ``vcascade quantize`` makes it, calibrated on ``frames``
    frames spread over ``video`` (:func:`calibration_frames`), without its agreement check (this benchmark and
    ``tools/bench.py`` measure the copy, whatever its agreement). Returns ``out``."""
    detector = build_detector(YoloxDetectorConfig(intra_op_threads=1), fp32_path)
    calibration = [detector.preprocess(image)[0] for image in calibration_frames(video, frames)]
    return quantize_yolox(fp32_path, out, calibration, float_stride)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--frames", type=int, default=250)
    parser.add_argument("--calibration-frames", type=int, default=32)
    parser.add_argument("--float-stride", type=int, default=FLOAT_STRIDE,
                        help="layers finer than this stride stay in float (vcascade quantize --float-stride)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_process_threads(None, 1)
    fp32_path = args.model_dir / "yolox_nano.onnx"
    video = resolve(VIDEO)
    with tempfile.TemporaryDirectory(prefix="bench-quantize-") as tmp:
        int8_path = Path(tmp) / "yolox_nano.int8.onnx"
        t0 = time.perf_counter()
        make_int8_copy(fp32_path, int8_path, video, args.calibration_frames, args.float_stride)
        made_s = time.perf_counter() - t0
        frames = calibration_frames(video, args.frames)
        result = compare(fp32_path, int8_path, frames)
    result.update(calibration_frames=args.calibration_frames, float_stride=args.float_stride,
                  quantize_s=round(made_s, 1), goal_agreement=GOAL_AGREEMENT)  # fmt: skip
    result["within_goal"] = result["agreement"] >= GOAL_AGREEMENT and result["speedup"] > 1.0
    return finish(result, args.json)


if __name__ == "__main__":
    sys.exit(main())

"""``vcascade quantize --model FILE --calibration VIDEO [--frames N] [--input-size S] [--out FILE]``: write the int8
copy of a YOLOX detector, calibrated on frames of a clip of the camera (:mod:`vcascade.edge.detection.quantize`).

By default the copy is ``<name>.int8.onnx`` beside the model, where an edge with ``detector.precision: int8``
finds it. The frames are spread evenly over the clip (decoded with PyAV, by its declared frame count). The copy is opened once after writing,
so a file that would fail the edge's start fails here.

Exit codes: 0 written, 1 the model, the clip or the conversion failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import av
import numpy as np

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.core.config import YoloxDetectorConfig
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.model_file import int8_path
from vcascade.edge.detection.quantize import quantize_yolox

DEFAULT_FRAMES = 32


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The model, the calibration clip, how many frames, the input size and where to write."""
    parser.add_argument("--model", type=Path, required=True, help="the fp32 YOLOX ONNX file")
    parser.add_argument("--calibration", type=Path, required=True, help="a video file of the camera (or alike)")
    parser.add_argument("--frames", type=int, default=DEFAULT_FRAMES, help="calibration frames, spread over the clip")
    parser.add_argument("--input-size", type=int, default=416, help="the model's input side, px (detector.input_size)")
    parser.add_argument("--out", type=Path, help="where to write (default: <model>.int8.onnx beside the model)")


def calibration_frames(video: Path, count: int) -> list[np.ndarray]:
    """Up to ``count`` frames (H, W, 3) uint8 BGR spread evenly over ``video``, by the frame count its container
    declares (none declared: its first ``count`` frames). Only the frames kept are held in memory.

    Raises:
        av.FFmpegError, OSError: the clip cannot be read.
    """
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        step = max(1, (stream.frames or 0) // count)
        kept = []
        for index, frame in enumerate(container.decode(stream)):
            if index % step == 0:
                kept.append(frame.to_ndarray(format="bgr24"))
                if len(kept) == count:
                    break
    return kept


def handle(args: argparse.Namespace) -> int:
    """Write the int8 copy and open it; print its path."""
    if args.frames < 1:
        print(f"vcascade quantize: --frames must be >= 1, got {args.frames}", file=sys.stderr)
        return EXIT_CONFIG
    out = args.out or int8_path(args.model)
    try:
        cfg = YoloxDetectorConfig(path=str(args.model.absolute()), input_size=args.input_size)
        detector = build_detector(cfg, args.model)
        images = calibration_frames(args.calibration, args.frames)
        if not images:
            raise ValueError(f"{args.calibration}: no frame decoded")
        quantize_yolox(args.model, out, [detector.preprocess(image)[0] for image in images])
        build_detector(cfg, out)  # the same contract check the edge makes at start
    except (OSError, ValueError, RuntimeError, av.FFmpegError) as exc:
        print(f"vcascade quantize: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"wrote {out} ({len(images)} calibration frames from {args.calibration})")
    return EXIT_OK

"""``vcascade quantize --model FILE --calibration VIDEO [--frames N] [--input-size S] [--float-stride N]
[--out FILE]``: write the int8 copy of a YOLOX detector, calibrated on frames of a clip of the camera
(:mod:`vcascade.edge.detection.quantize`; ``--float-stride``: the layers finer than it stay in float).

By default the copy is ``<name>.int8.onnx`` beside the model, where an edge with ``detector.precision: int8``
finds it. The frames are spread evenly over the clip (decoded with PyAV, by its declared frame count). The copy is
opened once after writing, so a file that would fail the edge's start fails here. Then both models detect the
same number of other frames of the clip, between the calibration frames, and the copy is kept only when it
finds at least ``--min-agreement`` of the fp32 model's boxes (:mod:`vcascade.edge.detection.agreement`): a copy
that misses objects is refused with its figure, never left where an edge would open it.

Exit codes: 0 written, 1 the model, the clip or the conversion failed, or the copy disagrees; 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import av
import numpy as np

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.core.config import YoloxDetectorConfig
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.agreement import agreement
from vcascade.edge.detection.model_file import int8_path
from vcascade.edge.detection.quantize import FLOAT_STRIDE, quantize_yolox

DEFAULT_FRAMES = 32
DEFAULT_MIN_AGREEMENT = 0.95
"""Share of the fp32 model's boxes the int8 copy must find (same class, IoU >= 0.5) to be kept (issue 32's goal)."""


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The model, the calibration clip, how many frames, the input size and where to write."""
    parser.add_argument("--model", type=Path, required=True, help="the fp32 YOLOX ONNX file")
    parser.add_argument("--calibration", type=Path, required=True, help="a video file of the camera (or alike)")
    parser.add_argument("--frames", type=int, default=DEFAULT_FRAMES, help="calibration frames, spread over the clip")
    parser.add_argument("--input-size", type=int, default=416, help="the model's input side, px (detector.input_size)")
    parser.add_argument("--out", type=Path, help="where to write (default: <model>.int8.onnx beside the model)")
    parser.add_argument("--float-stride", type=int, default=FLOAT_STRIDE,
                        help="layers finer than this stride stay in float (8: faster, fewer boxes kept; 1: none)")
    parser.add_argument("--min-agreement", type=float, default=DEFAULT_MIN_AGREEMENT,
                        help="share of the fp32 boxes the copy must find on held-out frames to be kept (0..1)")


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
    """Write the int8 copy, open it, check its agreement with fp32 on held-out frames; keep it or refuse it."""
    if args.frames < 1:
        print(f"vcascade quantize: --frames must be >= 1, got {args.frames}", file=sys.stderr)
        return EXIT_CONFIG
    if args.float_stride < 1:
        print(f"vcascade quantize: --float-stride must be >= 1, got {args.float_stride}", file=sys.stderr)
        return EXIT_CONFIG
    if not 0.0 <= args.min_agreement <= 1.0:
        print(f"vcascade quantize: --min-agreement must be in 0..1, got {args.min_agreement}", file=sys.stderr)
        return EXIT_CONFIG
    out = args.out or int8_path(args.model)
    candidate = out.with_name(out.name + ".candidate")
    try:
        cfg = YoloxDetectorConfig(path=str(args.model.absolute()), input_size=args.input_size)
        detector = build_detector(cfg, args.model)
        spread = calibration_frames(args.calibration, 2 * args.frames)
        images, held_out = spread[0::2], spread[1::2] or spread[0::2]
        if not images:
            raise ValueError(f"{args.calibration}: no frame decoded")
        quantize_yolox(args.model, candidate, [detector.preprocess(image)[0] for image in images], args.float_stride)
        int8 = build_detector(cfg, candidate)  # the same contract check the edge makes at start
        found = agreement(detector, int8, held_out)
    except (OSError, ValueError, RuntimeError, av.FFmpegError) as exc:
        candidate.unlink(missing_ok=True)
        print(f"vcascade quantize: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    figures = (f"it finds {found.recall:.0%} of the fp32 model's {found.reference_boxes} boxes on {len(held_out)} "
               f"held-out frames (same class, IoU >= 0.5), precision {found.precision:.0%}")  # fmt: skip
    if found.recall < args.min_agreement:
        candidate.unlink(missing_ok=True)
        print(f"vcascade quantize: int8 copy refused: {figures}; --min-agreement is {args.min_agreement:.0%}. "
              "Keep precision fp32 for this model", file=sys.stderr)  # fmt: skip
        return EXIT_FAILURE
    os.replace(candidate, out)
    print(f"wrote {out} ({len(images)} calibration frames from {args.calibration}); {figures}")
    return EXIT_OK

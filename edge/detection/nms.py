"""From decoded candidate boxes to the detections of one frame: best class, thresholds, class-aware NMS.

Semantics follow the references of the YOLO family: YOLOX ``yolox/utils/demo_utils.py``
``multiclass_nms_class_agnostic`` and Ultralytics ``ultralytics/utils/ops.py`` ``non_max_suppression``
(``multi_label=False``: each candidate keeps its best class; a box only suppresses boxes of its own class;
Ultralytics keeps at most ``max_det=300`` per image).
"""

from __future__ import annotations

import cv2
import numpy as np

from vcascade.core.detections import Detections
from vcascade.edge.detection.letterbox import Placement


def batched_nms(xyxy: np.ndarray, score: np.ndarray, class_id: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Class-aware non-maximum suppression with OpenCV's ``cv2.dnn.NMSBoxesBatched``.

    A box is removed when a higher-scored box of the same class overlaps it with IoU > ``iou_threshold``;
    boxes of different classes never suppress each other (YOLOX ``multiclass_nms`` / torchvision
    ``batched_nms`` semantics).

    Args:
        xyxy: (n, 4) float32 boxes, px. score: (n,) float32. class_id: (n,) int.
        iou_threshold: 0..1.

    Returns:
        (k,) int64 indices of the kept boxes, highest score first.
    """
    if len(xyxy) == 0:
        return np.zeros(0, np.int64)
    xywh = np.concatenate((xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]), axis=1).astype(np.float32)
    kept = cv2.dnn.NMSBoxesBatched(xywh, score.astype(np.float32), class_id.astype(np.int32), 0.0, iou_threshold)
    kept = np.asarray(kept, np.int64).reshape(-1)
    return kept[np.argsort(-score[kept], kind="stable")]


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    """(n, 4) centre x, centre y, width, height -> (n, 4) float32 x1, y1, x2, y2 (same units)."""
    xywh = xywh.astype(np.float32, copy=False)
    half = xywh[:, 2:4] / 2
    return np.concatenate((xywh[:, :2] - half, xywh[:, :2] + half), axis=1)


def select_detections(
    xyxy: np.ndarray,
    scores: np.ndarray,
    placement: Placement,
    frame_hw: tuple[int, int],
    *,
    score_threshold: float,
    nms_iou: float,
    class_ids: np.ndarray | None = None,
    max_detections: int | None = None,
) -> Detections:
    """Best class per candidate, score and class filters, class-aware NMS, map to frame px and clip.

    Args:
        xyxy: (n, 4) float32 candidate boxes in canvas px.
        scores: (n, C) float32 per-class scores 0..1.
        placement: where the frame lies on the canvas (boxes are mapped back with :meth:`Placement.to_frame`).
        frame_hw: (height, width) of the original frame, px.
        score_threshold: minimum best-class score kept.
        nms_iou: IoU above which a lower-scored box of the same class is removed.
        class_ids: (k,) int32 class ids kept, or None for all.
        max_detections: at most this many detections, highest scores first (None: no cap).

    Returns:
        Detections in frame px, clipped to [0, W] x [0, H], highest score first; boxes that lie wholly in the
        padding (zero area after clipping) and non-finite boxes are dropped.
    """
    class_id = scores.argmax(axis=1) if scores.shape[1] else np.zeros(len(scores), np.int64)
    score = scores[np.arange(len(scores)), class_id] if scores.shape[1] else np.zeros(len(scores), np.float32)
    keep = (score >= score_threshold) & np.isfinite(xyxy).all(axis=1)
    if class_ids is not None:
        keep &= np.isin(class_id, class_ids)
    xyxy, score, class_id = placement.to_frame(xyxy[keep]), score[keep], class_id[keep]
    kept = batched_nms(xyxy, score, class_id, nms_iou)[:max_detections]
    xyxy, score, class_id = xyxy[kept], score[kept], class_id[kept]
    h, w = frame_hw
    xyxy = np.clip(xyxy, 0, np.array([w, h, w, h], np.float32))
    visible = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
    return Detections(xyxy[visible], score[visible], class_id[visible])

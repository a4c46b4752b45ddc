"""How far two detectors agree on the same frames: the check ``vcascade quantize`` makes before it keeps an int8
copy, and the figure ``tools/bench_quantize.py`` reports.

Agreement is the share of the reference detector's boxes matched one-to-one by a box of the candidate of the
same class at IoU >= 0.5 (greedy, best IoU first: the matching of the PASCAL VOC / COCO detection evaluation,
Everingham et al., IJCV 2010), counted over every frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import supervision as sv

from vcascade.core.detections import Detections

MATCH_IOU = 0.5
"""IoU from which two boxes of the same class are one object (PASCAL VOC's threshold)."""


def matched_boxes(reference: Detections, candidate: Detections, iou_threshold: float = MATCH_IOU) -> int:
    """Pairs of one ``reference`` box and one ``candidate`` box of the same class with IoU >= ``iou_threshold``,
    each box in at most one pair, best IoU first. Boxes are (N, 4) float32 xyxy pixels (``Detections.xyxy``)."""
    if not len(reference) or not len(candidate):
        return 0
    iou = sv.box_iou_batch(reference.xyxy.astype(np.float64), candidate.xyxy.astype(np.float64))
    iou[reference.class_id[:, None] != candidate.class_id[None, :]] = 0.0
    pairs = 0
    for _ in range(min(len(reference), len(candidate))):
        i, j = np.unravel_index(int(np.argmax(iou)), iou.shape)
        if iou[i, j] < iou_threshold:
            break
        pairs += 1
        iou[i, :], iou[:, j] = 0.0, 0.0
    return pairs


@dataclass(frozen=True)
class Agreement:
    """Boxes each detector found over the same frames and how many of them matched (:func:`matched_boxes`)."""

    reference_boxes: int
    candidate_boxes: int
    matched: int

    @property
    def recall(self) -> float:
        """Matched over the reference's boxes, 0..1 (1.0 when the reference found none)."""
        return self.matched / self.reference_boxes if self.reference_boxes else 1.0

    @property
    def precision(self) -> float:
        """Matched over the candidate's boxes, 0..1 (1.0 when the candidate found none)."""
        return self.matched / self.candidate_boxes if self.candidate_boxes else 1.0


def agreement(reference: Callable[[np.ndarray], Detections], candidate: Callable[[np.ndarray], Detections],
              frames: Iterable[np.ndarray]) -> Agreement:  # fmt: skip
    """Run both detectors on every frame ((H, W, 3) uint8 BGR) and count their boxes and matches."""
    ref_boxes = cand_boxes = matched = 0
    for image in frames:
        ref, cand = reference(image), candidate(image)
        ref_boxes, cand_boxes = ref_boxes + len(ref), cand_boxes + len(cand)
        matched += matched_boxes(ref, cand)
    return Agreement(ref_boxes, cand_boxes, matched)

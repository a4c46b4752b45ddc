"""What the ROI policy selects from one frame: the detections it sends, each with why, for which recognizer and
the rectangle to crop, and the detections it suppresses, each with why (pure data, no I/O).

One type from the policy to the wire: :class:`RoiSelection` is struct-of-arrays like
:class:`~vcascade.core.detections.Detections` (which it holds) and shape-checked on construction, so the crop
step (:mod:`vcascade.edge.selection.roi`) and the ROI header take one row of it as it is, with no size rule of their own.
The rules that fill it are :mod:`vcascade.edge.selection.roi_policy`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vcascade.core.detections import Detections

SENT_REASONS = ("first", "refresh", "better", "every_detection")
"""Why a detection was sent."""

SUPPRESS_REASONS = ("class", "size", "score", "no_route", "tentative", "sent_recently", "backlog")
"""Why a detection was not sent (the ``reason`` label of ``vcascade_edge_rois_suppressed_total``)."""

FOLLOWED_REASONS = frozenset({"tentative", "sent_recently", "backlog"})
"""Suppressed detections that are objects being followed, which get a ``tracked`` output line."""


@dataclass(frozen=True)
class RoiSelection:
    """The ROI policy's verdict on one frame's detections: n rows sent, m rows suppressed, each in frame order.

    Attributes:
        detections: the n detections sent, boxes in original-frame pixels.
        send_reason: (n,) str, why each is sent, one of :data:`SENT_REASONS`.
        recognizer: (n,) str, the recognizer each ROI is for (:mod:`vcascade.edge.selection.roi_policy`; ``""``: any).
        crop_xyxy: (n, 4) int32, the rectangle each ROI crops (the box padded and clamped to the frame), x1, y1,
            x2, y2 in original-frame pixels, x2/y2 exclusive, at least 1 px wide and high.
        suppressed: the m detections not sent.
        suppress_reason: (m,) str, why each is not sent, one of :data:`SUPPRESS_REASONS`.

    Sequences (lists, tuples) are accepted for the arrays and stored as numpy arrays.

    Raises:
        TypeError: on construction, ``detections`` or ``suppressed`` is not a :class:`Detections`, a reason or
            recognizer array is not of str, or ``crop_xyxy`` is not of integers.
        ValueError: on construction, an array is not of its shape, lengths disagree with their detections, a
            reason is not one of its set, or a crop rectangle is empty or starts before the frame.
    """

    detections: Detections
    send_reason: np.ndarray
    recognizer: np.ndarray
    crop_xyxy: np.ndarray
    suppressed: Detections
    suppress_reason: np.ndarray

    def __post_init__(self) -> None:
        for name in ("detections", "suppressed"):
            if not isinstance(getattr(self, name), Detections):
                raise TypeError(f"{name} must be Detections, got {type(getattr(self, name)).__name__}")
        n, m = len(self.detections), len(self.suppressed)
        send_reason = _str_array("send_reason", self.send_reason, n, SENT_REASONS)
        suppress_reason = _str_array("suppress_reason", self.suppress_reason, m, SUPPRESS_REASONS)
        object.__setattr__(self, "send_reason", send_reason)
        object.__setattr__(self, "recognizer", _str_array("recognizer", self.recognizer, n))
        object.__setattr__(self, "crop_xyxy", _crop_array(self.crop_xyxy, n))
        object.__setattr__(self, "suppress_reason", suppress_reason)

    def __len__(self) -> int:
        """The number of ROIs sent (n)."""
        return len(self.detections)

    def suppressed_counts(self) -> dict[str, int]:
        """Suppressed detections per reason (only the reasons that occur): ``vcascade_edge_rois_suppressed_total``."""
        reasons, counts = np.unique(self.suppress_reason, return_counts=True)
        return {str(reason): int(count) for reason, count in zip(reasons, counts)}

    def followed(self) -> Detections:
        """The suppressed detections that are objects being followed (:data:`FOLLOWED_REASONS`), in frame order:
        the ones that get a ``tracked`` line."""
        return self.suppressed[np.isin(self.suppress_reason, sorted(FOLLOWED_REASONS))]


def crop_boxes(xyxy: np.ndarray, frame_hw: tuple[int, int], padding_px: int) -> np.ndarray:
    """Pad boxes on every side and clamp them to the frame.

    Args:
        xyxy: (n, 4) float boxes in original-frame pixels.
        frame_hw: (height, width) of the frame, px.
        padding_px: pixels added on each side before clamping.

    Returns:
        (n, 4) int32 x1, y1, x2, y2 with 0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height (floor/ceil rounding,
        so the crop always covers the part of the box inside the frame). Empty (x1 == x2 or y1 == y2) only for a
        box wholly outside the frame.
    """
    h, w = frame_hw
    boxes = np.asarray(xyxy).reshape(-1, 4)  # padded in its own dtype (float32 for Detections)
    low = np.clip(np.floor(boxes[:, :2] - padding_px), 0, [w, h])
    high = np.maximum(np.clip(np.ceil(boxes[:, 2:] + padding_px), 0, [w, h]), low)
    return np.concatenate([low, high], axis=1).astype(np.int32)


def _str_array(name: str, values: object, length: int, allowed: tuple[str, ...] | None = None) -> np.ndarray:
    """``values`` as a (length,) str array; raises TypeError (not str), ValueError (shape, value not in ``allowed``)."""
    arr = np.asarray(values)
    if arr.size == 0:
        arr = arr.astype(str)
    if arr.dtype.kind != "U":
        raise TypeError(f"{name} must hold str, got dtype {arr.dtype}")
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {arr.shape}")
    if allowed is not None and not np.isin(arr, allowed).all():
        raise ValueError(f"{name} has {sorted(set(arr.tolist()) - set(allowed))}, expected one of {allowed}")
    return arr


def _crop_array(values: object, length: int) -> np.ndarray:
    """``values`` as a (length, 4) int32 array of non-empty rectangles; raises TypeError, ValueError."""
    arr = np.asarray(values)
    if arr.size == 0:
        arr = np.zeros((0, 4), np.int32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"crop_xyxy must hold integers, got dtype {arr.dtype}")
    if arr.shape != (length, 4):
        raise ValueError(f"crop_xyxy must have shape ({length}, 4), got {arr.shape}")
    if (arr[:, :2] < 0).any() or (arr[:, 2:] <= arr[:, :2]).any():
        raise ValueError("crop_xyxy must have 0 <= x1 < x2 and 0 <= y1 < y2 in every row")
    return arr.astype(np.int32)

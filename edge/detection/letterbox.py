"""Letterbox resizing of a camera frame into a square network input, in the two variants the YOLO family uses.

* **Top-left** (YOLOX): Megvii-BaseDetection/YOLOX ``yolox/data/data_augment.py`` ``preproc``: scale
  r = min(S / H, S / W), resized size ``int(W * r)`` x ``int(H * r)``, pasted into the top-left corner of an
  S x S canvas filled with 114. No offset, so frame px = canvas px / r.
* **Centred** (YOLOv5, YOLOv8, YOLO11): Ultralytics ``ultralytics/data/augment.py`` ``LetterBox`` with
  ``auto=False, scale_fill=False, scaleup=True, center=True`` (what their predictor uses for a fixed-size ONNX
  model; YOLOv5's ``utils/augmentations.py`` ``letterbox`` is the same): resized size ``round(W * r)`` x
  ``round(H * r)``, the remaining padding split as ``top = round(dh / 2 - 0.1)``, ``left = round(dw / 2 - 0.1)``
  (the rest below / right), fill 114. Frame px = (canvas px - (left, top)) / r. Ultralytics ``scale_boxes``
  recomputes the pad from the unrounded size; the :class:`Placement` used here is the one actually applied.

Both resize with ``cv2.INTER_LINEAR`` and return BGR uint8 canvases; the per-family channel order and scaling
(YOLOX: BGR 0..255; Ultralytics: RGB 0..1) are applied by the detector classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

PAD_VALUE = 114
"""Canvas fill value (YOLOX ``preproc``: ``np.ones(...) * 114``; Ultralytics ``LetterBox``: ``(114, 114, 114)``)."""


@dataclass(frozen=True)
class Placement:
    """Where a frame lies on the network canvas.

    Attributes:
        scale: r, canvas px per frame px.
        left_px: canvas columns of padding left of the frame.
        top_px: canvas rows of padding above the frame.
    """

    scale: float
    left_px: int = 0
    top_px: int = 0

    def to_frame(self, xyxy: np.ndarray) -> np.ndarray:
        """Map (n, 4) float32 canvas-px boxes (x1, y1, x2, y2) to frame px: (xyxy - offset) / scale."""
        offset = np.array([self.left_px, self.top_px, self.left_px, self.top_px], np.float32)
        return ((xyxy - offset) / np.float32(self.scale)).astype(np.float32, copy=False)


def to_bgr(frame: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 BGR from gray (H, W) / (H, W, 1), BGR or BGRA.

    Raises:
        ValueError: not a uint8 numpy array, an unsupported shape, or an empty frame.
    """
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8:
        raise ValueError(f"frame must be a uint8 numpy array, got {getattr(frame, 'dtype', type(frame).__name__)}")
    if frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 1):
        conversion = cv2.COLOR_GRAY2BGR
    elif frame.ndim == 3 and frame.shape[2] == 4:
        conversion = cv2.COLOR_BGRA2BGR
    elif frame.ndim == 3 and frame.shape[2] == 3:
        conversion = None
    else:
        raise ValueError(f"frame must have shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got {frame.shape}")
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"frame is empty: shape {frame.shape}")
    return frame if conversion is None else cv2.cvtColor(frame, conversion)


def letterbox_top_left(frame: np.ndarray, size: int) -> tuple[np.ndarray, Placement]:
    """YOLOX ``preproc``: resize keeping aspect ratio into the top-left corner of a ``size`` x ``size`` canvas.

    Args:
        frame: (H, W, 3) uint8 BGR (gray and BGRA accepted, see :func:`to_bgr`).
        size: canvas side, px.

    Returns:
        (size, size, 3) uint8 BGR canvas filled with 114 outside the frame, and its :class:`Placement` (no offset).

    Raises:
        ValueError: see :func:`to_bgr`.
    """
    frame = to_bgr(frame)
    h, w = frame.shape[:2]
    r = min(size / h, size / w)
    # +1e-6: a long side of exactly `size` must not become size-1 through float round-off in w * (size / w).
    new_w, new_h = (min(size, max(1, int(side * r + 1e-6))) for side in (w, h))
    canvas = np.full((size, size, 3), PAD_VALUE, np.uint8)
    canvas[:new_h, :new_w] = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return canvas, Placement(r)


def letterbox_centered(frame: np.ndarray, size: int) -> tuple[np.ndarray, Placement]:
    """Ultralytics ``LetterBox(auto=False, center=True)``: resize keeping aspect ratio, centre, pad with 114.

    Args:
        frame: (H, W, 3) uint8 BGR (gray and BGRA accepted, see :func:`to_bgr`).
        size: canvas side, px.

    Returns:
        (size, size, 3) uint8 BGR canvas and its :class:`Placement` (scale r = min(size / H, size / W), the
        left and top padding in px).

    Raises:
        ValueError: see :func:`to_bgr`.
    """
    frame = to_bgr(frame)
    h, w = frame.shape[:2]
    r = min(size / h, size / w)
    new_w, new_h = (min(size, max(1, int(round(side * r)))) for side in (w, h))
    half_dw, half_dh = (size - new_w) / 2, (size - new_h) / 2
    left, top = int(round(half_dw - 0.1)), int(round(half_dh - 0.1))
    if (new_w, new_h) != (w, h):
        frame = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    canvas = np.full((size, size, 3), PAD_VALUE, np.uint8)
    canvas[top : top + new_h, left : left + new_w] = frame
    return canvas, Placement(r, left, top)

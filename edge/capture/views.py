"""A camera's view of its source (``view:`` of a camera): crop, mirror, rescale, JPEG re-encode, and the same
geometry applied to boxes.

The edge applies :func:`apply_view` to each decoded frame (edge/capture/source.py). ``tools/bench_reid.py`` uses
the same two functions to build cameras that show one clip without replaying its pixels, and
:func:`view_boxes` to carry the clip's ground-truth boxes into each camera's pixels.
"""

from __future__ import annotations

import cv2
import numpy as np

from vcascade.core.config import CameraViewConfig


def crop_px(view: CameraViewConfig, height_px: int, width_px: int) -> tuple[int, int, int, int]:
    """The view's crop box in source pixels, ``(x0, y0, x1, y1)`` (the whole frame without a crop)."""
    x0, y0, x1, y1 = view.crop_xyxy_frac or (0.0, 0.0, 1.0, 1.0)
    left, top = round(x0 * width_px), round(y0 * height_px)
    return left, top, max(left + 1, round(x1 * width_px)), max(top + 1, round(y1 * height_px))


def apply_view(image: np.ndarray, view: CameraViewConfig) -> np.ndarray:
    """The frame as the camera's view shows it: crop, mirror, rescale, then JPEG re-encode.

    Args:
        image: (H, W, 3) uint8 BGR frame.
        view: the camera's ``view`` settings.

    Returns:
        (h, w, 3) uint8 BGR, C-contiguous; h, w = the crop's size times ``view.scale`` (rounded, >= 1).

    Raises:
        RuntimeError: OpenCV failed to encode or decode the JPEG (not expected for a valid uint8 image).
    """
    x0, y0, x1, y1 = crop_px(view, image.shape[0], image.shape[1])
    out = image[y0:y1, x0:x1]
    if view.mirror:
        out = out[:, ::-1]
    if view.scale != 1.0:
        size = (max(1, round(out.shape[1] * view.scale)), max(1, round(out.shape[0] * view.scale)))
        out = cv2.resize(out, size, interpolation=cv2.INTER_AREA if view.scale < 1 else cv2.INTER_LINEAR)
    out = np.ascontiguousarray(out)
    if view.jpeg_quality is not None:
        ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, view.jpeg_quality])
        out = cv2.imdecode(data, cv2.IMREAD_COLOR) if ok else None
        if out is None:
            raise RuntimeError("JPEG re-encoding of a view frame failed")
    return out


def view_boxes(xyxy: np.ndarray, view: CameraViewConfig, height_px: int, width_px: int) -> np.ndarray:
    """Carry boxes from source-frame pixels into the view's pixels (clipped to the crop).

    Args:
        xyxy: (n, 4) float boxes in source pixels.
        view: the camera's ``view`` settings.
        height_px, width_px: the source frame's size.

    Returns:
        (n, 4) float32 boxes in view pixels, x0 <= x1 and y0 <= y1; a box outside the crop has zero area.
    """
    x0, y0, x1, y1 = crop_px(view, height_px, width_px)
    boxes = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4).copy()
    boxes[:, [0, 2]] = np.clip(boxes[:, [0, 2]] - x0, 0, x1 - x0)
    boxes[:, [1, 3]] = np.clip(boxes[:, [1, 3]] - y0, 0, y1 - y0)
    if view.mirror:
        boxes[:, [0, 2]] = (x1 - x0) - boxes[:, [2, 0]]
    return boxes * np.float32(view.scale)

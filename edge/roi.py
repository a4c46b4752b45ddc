"""From detections to ROIs: crop each kept detection from the original frame and encode it.

Crops are views into the frame (no copy) until JPEG encoding, which is the one copy an ROI needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from vcascade.core.config import RoiConfig
from vcascade.core.detections import Detections


@dataclass(frozen=True)
class Crop:
    """One detection's crop.

    Attributes:
        index: row of the detection in the frame's :class:`Detections`.
        crop_xyxy: the cropped rectangle (x1, y1, x2, y2), int pixels of the original frame, x2/y2 exclusive.
        pixels: (h, w, 3) uint8 BGR view into the frame.
    """

    index: int
    crop_xyxy: tuple[int, int, int, int]
    pixels: np.ndarray


def crop_box(xyxy: np.ndarray, frame_hw: tuple[int, int], padding_px: int) -> tuple[int, int, int, int]:
    """Pad a box on every side and clamp it to the frame.

    Args:
        xyxy: (4,) float box in original-frame pixels.
        frame_hw: (height, width) of the frame, px.
        padding_px: pixels added on each side before clamping.

    Returns:
        Integer (x1, y1, x2, y2) with 0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height (floor/ceil rounding,
        so the crop always covers the box).
    """
    h, w = frame_hw
    x1 = int(np.clip(np.floor(xyxy[0] - padding_px), 0, w))
    y1 = int(np.clip(np.floor(xyxy[1] - padding_px), 0, h))
    x2 = int(np.clip(np.ceil(xyxy[2] + padding_px), 0, w))
    y2 = int(np.clip(np.ceil(xyxy[3] + padding_px), 0, h))
    return x1, y1, max(x1, x2), max(y1, y2)


def select_crops(frame: np.ndarray, detections: Detections, cfg: RoiConfig) -> list[Crop]:
    """Crops for the detections whose box is at least ``cfg.min_size_px`` wide and high.

    Args:
        frame: (H, W, 3) uint8 BGR original frame.
        detections: the frame's detections, boxes in original-frame pixels.
        cfg: padding and minimum size.

    Returns:
        One :class:`Crop` per kept detection, in detection order.
    """
    crops = []
    hw = frame.shape[:2]
    for i, box in enumerate(detections.xyxy):
        if box[2] - box[0] < cfg.min_size_px or box[3] - box[1] < cfg.min_size_px:
            continue
        x1, y1, x2, y2 = crop_box(box, hw, cfg.padding_px)
        if x2 - x1 < 1 or y2 - y1 < 1:
            continue
        crops.append(Crop(i, (x1, y1, x2, y2), frame[y1:y2, x1:x2]))
    return crops


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    """JPEG-encode a (h, w, 3) uint8 BGR crop with OpenCV at ``quality`` (1..100).

    Raises:
        ValueError: OpenCV could not encode the crop.
    """
    ok, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"JPEG encoding failed for a crop of shape {pixels.shape}")
    return buf.tobytes()

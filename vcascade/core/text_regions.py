"""Text regions from a DB probability map, and each region cut out as a text line for the recognizer.

DB (differentiable binarization, Liao et al., AAAI 2020, "Real-time Scene Text Detection with Differentiable
Binarization") predicts a per-pixel text probability map whose text regions are *shrunk* kernels of the real
text; the boxes come back by thresholding the map, taking each connected region's minimum-area rectangle and
expanding it again by the offset ``D' = A' x r' / L'`` (paper, section 3.3, "Label generation" and "Inference":
``A'`` the shrunk polygon's area, ``L'`` its perimeter, ``r'`` the unclip ratio, 1.5 in the paper).

The steps and constants follow PaddleOCR's ``DBPostProcess`` (ppocr/postprocess/db_postprocess.py; rapidocr's
``ch_ppocr_det`` does the same): binarize at ``threshold`` (0.3), dilate with a 2x2 kernel, contours with
OpenCV (``cv2.findContours``), minimum-area rectangle (``cv2.minAreaRect``), score = mean probability inside the
rectangle ("fast" score mode, kept when >= ``box_threshold``, 0.5 in rapidocr, 0.6 in PaddleOCR), unclip, and a
minimum short side of 3 px before and 5 px after unclipping. PaddleOCR unclips with pyclipper's round offset then
takes the minimum-area rectangle again; for a rectangle of sides w x h that rectangle is exactly
(w + 2D) x (h + 2D) with the same centre and angle, which is what :func:`unclip_rect` computes (no polygon
library needed).

Cutting a region out (:func:`cut_region`) is PaddleOCR's ``get_rotate_crop_image`` (tools/infer/utility.py): a
perspective warp of the rectangle's four corners to an upright w x h image (cubic interpolation, border
replicated), turned 90 degrees when it is at least 1.5 times taller than wide (vertical text).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

MIN_SIDE_PX = 3
"""Regions whose short side is under this before unclipping are dropped (PaddleOCR ``min_size``), map px."""
VERTICAL_RATIO = 1.5
"""A cut-out region at least this many times taller than wide is turned to horizontal (PaddleOCR)."""


@dataclass(frozen=True)
class DbParams:
    """DB post-processing constants (defaults: rapidocr 3.x ``Det`` config, PaddleOCR's ``DBPostProcess``).

    Attributes:
        threshold: probability at or above which a pixel is text (binarization), 0..1.
        box_threshold: a region is kept when its mean probability is at least this, 0..1.
        unclip_ratio: ``r'`` of the unclip offset ``D' = A' r' / L'`` (Liao et al. 2020, section 3.3).
        max_regions: at most this many regions per image (the best scoring ones).
    """

    threshold: float = 0.3
    box_threshold: float = 0.5
    unclip_ratio: float = 1.6
    max_regions: int = 8


@dataclass(frozen=True)
class Region:
    """One text region found on a probability map.

    Attributes:
        corners: (4, 2) float32 corners (x, y) in map pixels, clockwise from top-left.
        score: mean text probability inside the (not yet unclipped) rectangle, 0..1.
    """

    corners: np.ndarray
    score: float

    def xyxy(self) -> tuple[float, float, float, float]:
        """The axis-aligned box around the corners (x1, y1, x2, y2), map pixels."""
        x, y = self.corners[:, 0], self.corners[:, 1]
        return float(x.min()), float(y.min()), float(x.max()), float(y.max())


def db_regions(prob: np.ndarray, params: DbParams, valid_wh: tuple[int, int] | None = None) -> list[Region]:
    """The text regions of one DB probability map, in reading order (top to bottom, then left to right).

    Args:
        prob: (H, W) float32 text probability map, 0..1.
        params: thresholds, unclip ratio and region count.
        valid_wh: (width, height) of the part of the map that holds the image (the rest is padding); corners
            are clipped to it. None: the whole map.

    Returns:
        At most ``params.max_regions`` regions, the best scoring ones; empty when the map holds no text.
    """
    height, width = prob.shape
    right, bottom = valid_wh or (width, height)
    bitmap = (prob >= params.threshold).astype(np.uint8)
    bitmap = cv2.dilate(bitmap, np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    regions = []
    for contour in contours[:1000]:  # PaddleOCR's max_candidates
        rect = cv2.minAreaRect(contour)
        if min(rect[1]) < MIN_SIDE_PX:
            continue
        corners = ordered_corners(cv2.boxPoints(rect))
        score = mean_inside(prob, corners)
        if score < params.box_threshold:
            continue
        grown = unclip_rect(rect, params.unclip_ratio)
        if min(grown[1]) < MIN_SIDE_PX + 2:
            continue
        corners = ordered_corners(cv2.boxPoints(grown))
        corners[:, 0] = np.clip(corners[:, 0], 0, right)
        corners[:, 1] = np.clip(corners[:, 1], 0, bottom)
        regions.append(Region(corners, score))
    regions = sorted(regions, key=lambda r: -r.score)[: params.max_regions]
    return sorted(regions, key=lambda r: (round(float(r.corners[:, 1].min()) / 10), float(r.corners[:, 0].min())))


def unclip_rect(rect: tuple, ratio: float) -> tuple:
    """Expand an OpenCV rotated rectangle ``((cx, cy), (w, h), angle)`` by ``D = w h ratio / (2 (w + h))`` on
    every side (Liao et al. 2020, section 3.3; the minimum-area rectangle of PaddleOCR's round offset)."""
    (cx, cy), (w, h), angle = rect
    offset = w * h * ratio / (2.0 * (w + h))
    return (cx, cy), (w + 2 * offset, h + 2 * offset), angle


def ordered_corners(points: np.ndarray) -> np.ndarray:
    """Four corners (4, 2) ordered top-left, top-right, bottom-right, bottom-left (PaddleOCR's
    ``get_mini_boxes``: the two leftmost points give top-left/bottom-left by y, the two others the rest)."""
    pts = sorted(np.asarray(points, np.float32).tolist(), key=lambda p: p[0])
    left = sorted(pts[:2], key=lambda p: p[1])
    right = sorted(pts[2:], key=lambda p: p[1])
    return np.array([left[0], right[0], right[1], left[1]], np.float32)


def mean_inside(prob: np.ndarray, corners: np.ndarray) -> float:
    """Mean of ``prob`` inside the polygon ``corners`` (PaddleOCR's ``box_score_fast``), 0..1."""
    height, width = prob.shape
    x0 = int(np.clip(np.floor(corners[:, 0].min()), 0, width - 1))
    x1 = int(np.clip(np.ceil(corners[:, 0].max()), 0, width - 1))
    y0 = int(np.clip(np.floor(corners[:, 1].min()), 0, height - 1))
    y1 = int(np.clip(np.ceil(corners[:, 1].max()), 0, height - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    shifted = (corners - np.array([x0, y0], np.float32)).round().astype(np.int32)
    cv2.fillPoly(mask, [shifted], 1)
    return float(cv2.mean(prob[y0 : y1 + 1, x0 : x1 + 1], mask)[0])


def cut_region(image: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """The region inside ``corners`` as an upright text line (PaddleOCR's ``get_rotate_crop_image``).

    Args:
        image: (H, W, C) float32 or uint8 image the corners are in.
        corners: (4, 2) float32, clockwise from top-left (:func:`ordered_corners`).

    Returns:
        (h, w, C) array of the same dtype, h and w >= 1; turned 90 degrees when at least 1.5 times taller than wide.
    """
    tl, tr, br, bl = corners
    width = max(1, int(max(np.linalg.norm(tl - tr), np.linalg.norm(bl - br))))
    height = max(1, int(max(np.linalg.norm(tl - bl), np.linalg.norm(tr - br))))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
    matrix = cv2.getPerspectiveTransform(corners.astype(np.float32), target)
    line = cv2.warpPerspective(image, matrix, (width, height), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
    if line.ndim == 2:
        line = line[:, :, None]
    if height >= VERTICAL_RATIO * width:
        line = np.rot90(line)
    return line

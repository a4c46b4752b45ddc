"""Drawing one preview: a frame shrunk to the preview width with its tracked boxes, their labels, and the
camera's counting lines and zones (OpenCV drawing calls; no state).

Lines and zones come from the camera's ``analytics`` settings (:class:`vcascade.core.schema.analytics.AnalyticsConfig`):
a counting line is drawn as a segment, a zone as a closed polygon, in frame pixels or normalised 0..1 as the
settings say. A camera without ``analytics`` draws boxes only.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from vcascade.core.config import CameraConfig
from vcascade.core.detections import Detections

LINE_COLOR_BGR = (0, 215, 255)
"""Counting lines: amber."""
ZONE_COLOR_BGR = (255, 160, 0)
"""Zones: blue."""
FONT = cv2.FONT_HERSHEY_SIMPLEX
FONT_SCALE = 0.45


@dataclass(frozen=True)
class Geometry:
    """A camera's lines and zones: each an (k, 2) float32 array of x, y points, in frame pixels, or in 0..1 of the
    frame's width and height when ``normalized``; ``line_names``/``zone_names`` label them (drawn at each one's
    first point; fewer names than shapes: the rest unlabelled)."""

    lines: tuple[np.ndarray, ...] = ()
    zones: tuple[np.ndarray, ...] = ()
    normalized: bool = False
    line_names: tuple[str, ...] = ()
    zone_names: tuple[str, ...] = ()


NO_GEOMETRY = Geometry()
"""A camera without lines or zones."""


def camera_geometry(camera_cfg: CameraConfig | None) -> Geometry:
    """The counting lines and zones of a camera's ``analytics`` settings (empty when it has none)."""
    analytics = None if camera_cfg is None else camera_cfg.analytics
    if analytics is None:
        return NO_GEOMETRY
    return Geometry(
        tuple(np.asarray(line.points, np.float32) for line in analytics.lines),
        tuple(np.asarray(zone.polygon, np.float32) for zone in analytics.zones),
        analytics.coordinates == "normalized",
        tuple(line.name for line in analytics.lines),
        tuple(zone.name for zone in analytics.zones),
    )


def track_color_bgr(track_id: int) -> tuple[int, int, int]:
    """A stable, saturated colour per track id (golden-ratio hue steps); grey for untracked (-1)."""
    if track_id < 0:
        return (180, 180, 180)
    hue = int((track_id * 0.618033988749895 % 1.0) * 180)
    bgr = cv2.cvtColor(np.uint8([[[hue, 220, 255]]]), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[0]), int(bgr[1]), int(bgr[2])


def annotate(
    image: np.ndarray, detections: Detections, labels: list[str], width_px: int, geometry: Geometry = NO_GEOMETRY
) -> np.ndarray:
    """The preview of one frame.

    Args:
        image: (H, W, 3) uint8 BGR frame (not modified).
        detections: its tracked detections, boxes in frame pixels.
        labels: one text per detection (class, score, track, identity).
        width_px: preview width at most; a narrower frame keeps its size.
        geometry: the camera's lines and zones (:func:`camera_geometry`).

    Returns:
        (h, w, 3) uint8 BGR, w = min(W, width_px), h = round(H * w / W).
    """
    height, width = image.shape[:2]
    scale = min(1.0, width_px / width)
    out = cv2.resize(image, (round(width * scale), round(height * scale)), interpolation=cv2.INTER_AREA) \
        if scale < 1.0 else image.copy()
    to_px = np.array([width, height], np.float32) * scale if geometry.normalized else np.float32(scale)
    for shapes, names, closed, color in ((geometry.zones, geometry.zone_names, True, ZONE_COLOR_BGR),
                                         (geometry.lines, geometry.line_names, False, LINE_COLOR_BGR)):
        for i, shape in enumerate(shapes):
            points = np.round(shape * to_px).astype(np.int32)
            cv2.polylines(out, [points], closed, color, 2, cv2.LINE_AA)
            if i < len(names):
                _label(out, names[i], int(points[0][0]), int(points[0][1]), color)
    for row in range(len(detections)):
        x1, y1, x2, y2 = (round(float(v) * scale) for v in detections.xyxy[row])
        color = track_color_bgr(int(detections.track_id[row]))
        cv2.rectangle(out, (x1, y1), (x2, y2), color, 2)
        _label(out, labels[row], x1, y1, color)
    return out


def _label(out: np.ndarray, text: str, x: int, y: int, color: tuple[int, int, int]) -> None:
    """Text on a filled box above (x, y), or inside the box when at the top edge."""
    (w, h), base = cv2.getTextSize(text, FONT, FONT_SCALE, 1)
    top = y - h - base - 2 if y - h - base - 2 >= 0 else y
    cv2.rectangle(out, (x, top), (x + w + 4, top + h + base + 2), color, cv2.FILLED)
    cv2.putText(out, text, (x + 2, top + h + 1), FONT, FONT_SCALE, (0, 0, 0), 1, cv2.LINE_AA)

"""The picture of an event, taken on the detector thread while its frame is at hand: the frame shrunk to the
history's ``frame_width_px`` with the track's box and the event's line or zone drawn, and the box cut from the full
frame. Both are made from the frame as it may leave through the ``snapshot`` exit (privacy masks filled, faces
redacted when the camera asks for it: :class:`vcascade.edge.privacy.redaction.RedactedFrame`) and encoded there,
a few milliseconds per event; the disk is the history's writer thread's (:mod:`vcascade.edge.history.evidence`).
"""

from __future__ import annotations

import numpy as np

from vcascade.core.detections import Detections
from vcascade.core.schema.analytics import AnalyticsConfig
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.history.event_frame import EventFrame
from vcascade.edge.preview.annotate import Geometry, annotate
from vcascade.edge.privacy.redaction import RedactedFrame

MAX_CROP_PX = 512
"""Longest side of an event's crop; a larger box is kept at about this size (every n-th pixel)."""


def event_frame(
    frame: RedactedFrame, tracked: Detections, event: AnalyticsEvent, cfg: AnalyticsConfig, width_px: int,
    quality: int,
) -> EventFrame:
    """The picture of ``event`` in ``frame`` (its (H, W, 3) uint8 BGR pixels are not modified), its track found in
    ``tracked`` (boxes in frame pixels), its line or zone found in ``cfg`` by name; JPEGs at ``quality`` (1..100).

    Raises:
        ValueError: OpenCV could not encode an image.
    """
    rows = np.flatnonzero(tracked.track_id == event.track_id)
    box = tracked[rows[:1]] if len(rows) else tracked[rows]
    label = f"{event.class_name} {event.type.replace('_', ' ')} {event.place}"
    geometry = _place_geometry(event, cfg)
    annotated = frame.render("snapshot", lambda px: annotate(px, box, [label] * len(box), width_px, geometry), quality)
    crop = None
    if len(box):
        x1, y1, x2, y2 = (int(round(float(v))) for v in box.xyxy[0])
        height, width = frame.frame.image.shape[:2]
        x1, y1, x2, y2 = max(0, x1), max(0, y1), min(width, x2), min(height, y2)
        if x2 > x1 and y2 > y1:
            step = max(1, -(-max(x2 - x1, y2 - y1) // MAX_CROP_PX))
            crop = frame.render("snapshot", lambda px: np.ascontiguousarray(px[y1:y2:step, x1:x2:step]), quality)
    return EventFrame(annotated, crop)


def _place_geometry(event: AnalyticsEvent, cfg: AnalyticsConfig) -> Geometry:
    normalized = cfg.coordinates == "normalized"
    if event.type == "line_cross":
        lines = tuple(np.asarray(line.points, np.float32) for line in cfg.lines if line.name == event.place)
        return Geometry(lines=lines, normalized=normalized, line_names=(event.place,) * len(lines))
    zones = tuple(np.asarray(zone.polygon, np.float32) for zone in cfg.zones if zone.name == event.place)
    return Geometry(zones=zones, normalized=normalized, zone_names=(event.place,) * len(zones))

"""The picture of an event (pixels only; taken by :func:`vcascade.edge.history.picture.event_frame` on the detector
thread, encoded by the history's writer thread, :mod:`vcascade.edge.history.evidence`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EventFrame:
    """An event's picture.

    Attributes:
        annotated: (h, w, 3) uint8 BGR, the frame at most ``frame_width_px`` wide with the box and the line or zone.
        crop: (h, w, 3) uint8 BGR, the track's box from the full frame (None: the track is not in this frame).
    """

    annotated: np.ndarray
    crop: np.ndarray | None

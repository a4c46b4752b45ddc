"""The picture of an event: JPEGs made by the redaction step for the ``snapshot`` exit
(:func:`vcascade.edge.history.picture.event_frame`, on the detector thread), written by the history's writer thread
(:mod:`vcascade.edge.history.evidence`)."""

from __future__ import annotations

from dataclasses import dataclass

from vcascade.edge.privacy.redaction import RedactedImage


@dataclass(frozen=True)
class EventFrame:
    """An event's picture.

    Attributes:
        annotated: the frame at most ``frame_width_px`` wide with the box and the line or zone.
        crop: the track's box from the full frame (None: the track is not in this frame).
    """

    annotated: RedactedImage
    crop: RedactedImage | None

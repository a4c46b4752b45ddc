"""Frames on their way out for tests of the exits: the redaction step of a camera without privacy settings (its
images leave labelled ``redacted=False``)."""

from __future__ import annotations

import time

import numpy as np

from vcascade.core.detections import Detections
from vcascade.edge.capture.frames import Frame
from vcascade.edge.privacy.redaction import CameraRedaction, RedactedFrame, RedactedImage


def outgoing(frame: Frame, detections: Detections | None = None) -> RedactedFrame:
    """``frame`` through the redaction step of a camera with no ``privacy`` settings."""
    return CameraRedaction(None, None, ()).redact(frame, detections if detections is not None else Detections.empty())


def crop_image(camera: str = "cam", size_px: int = 8) -> RedactedImage:
    """A grey ``size_px`` square ROI crop of ``camera``, as the link takes it."""
    image = np.full((size_px, size_px, 3), 128, np.uint8)
    frame = Frame(camera, 0, image, 0.0, time.perf_counter(), time.time() * 1000.0)
    return outgoing(frame).crop(np.array([0, 0, size_px, size_px]), 90)

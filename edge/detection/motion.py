"""Motion-gated detection: a camera's frame goes through the detector only where something moved (issue 32).

Most frames of a fixed camera are still (a parked street at night), and detection is most of the edge's CPU.
Like Frigate, the edge first asks a cheap motion mask whether a frame differs from the last one the detector saw:

* the frame is shrunk to a small grey image (``width`` px wide, OpenCV ``INTER_AREA``, which averages the
  pixels it merges and so also smooths sensor and compression noise);
* it is compared with the grey image of the camera's *last detected* frame (not the previous frame, so slow
  motion adds up until it counts); a pixel changed when the grey levels differ by more than
  ``pixel_threshold``; the frame has motion when at least ``min_area`` of the pixels changed;
* a frame without motion is *still*: it is not detected, unless ``max_gap_s`` of stream time has passed since
  the last detected frame, or the stream's clock went backwards (loop, reconnect), or it is the camera's first.

A still frame still goes through tracking with the last detected frame's detections carried over
(:meth:`vcascade.edge.node.EdgeNode.handle`): ByteTrack gets its timestamp, so its tracks keep their ids and
never expire while nothing moves (a stretch longer than ``lost_track_s`` without any update would otherwise end
them all). Every still frame is counted in ``vcascade_edge_detections_skipped_total{reason="no_motion"}``.

Decisions are made by the detector pool's threads in the order frames are taken (under the pool's take lock, or,
for a file camera's frame decoded by the taker, under its claim on the camera: :mod:`vcascade.edge.capture.pull`),
so a camera's reference image follows its frames in order.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import cv2
import numpy as np

from vcascade.core.config import MotionConfig

SKIP_REASON = "no_motion"
"""``reason`` label of a still frame in ``vcascade_edge_detections_skipped_total``."""


class MotionGate:
    """Whether one camera's frames need the detector (module docstring). Not thread-safe: one caller at a time.

    Args:
        cfg: the camera's ``motion`` settings.
    """

    def __init__(self, cfg: MotionConfig) -> None:
        self.cfg = cfg
        self._reference: np.ndarray | None = None
        self._reference_ts_ms = -math.inf
        self._reference_shape: tuple[int, ...] = ()  # of the full frame: carried boxes are in its pixels
        self.last_changed = 0.0  # fraction of changed pixels of the last frame compared

    def motion_image(self, image: np.ndarray) -> np.ndarray:
        """The small grey image motion is measured on.

        Args:
            image: (H, W, 3) uint8 BGR frame.

        Returns:
            (h, w) uint8 grey image, ``w = min(cfg.width, W)``, ``h`` keeping the aspect ratio (at least 1).
        """
        h, w = image.shape[:2]
        width = min(self.cfg.width, w)
        height = max(1, round(h * width / w))
        small = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
        return cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)

    def changed_fraction(self, grey: np.ndarray) -> float:
        """Fraction (0..1) of ``grey``'s pixels whose level differs from the reference by more than
        ``pixel_threshold``; 1.0 without a reference or when the image size changed."""
        if self._reference is None or self._reference.shape != grey.shape:
            return 1.0
        diff = cv2.absdiff(grey, self._reference)
        return float(np.count_nonzero(diff > self.cfg.pixel_threshold)) / diff.size

    def needs_detection(self, image: np.ndarray, stream_ts_ms: float) -> bool:
        """True if the frame goes through the detector (it then becomes the reference), False if it is still.

        Args:
            image: (H, W, 3) uint8 BGR frame.
            stream_ts_ms: its PTS, ms (a NaN or a value below the reference's forces a detection, and so does a
                frame size other than the reference's).
        """
        grey = self.motion_image(image)
        self.last_changed = self.changed_fraction(grey) if image.shape == self._reference_shape else 1.0
        gap_ms = stream_ts_ms - self._reference_ts_ms
        due = not (0.0 <= gap_ms < self.cfg.max_gap_s * 1000.0)  # also NaN, and a clock that went back
        if self.last_changed < self.cfg.min_area and not due:
            return False
        self._reference, self._reference_ts_ms, self._reference_shape = grey, stream_ts_ms, image.shape
        return True


class MotionGates:
    """The motion gates of an edge's cameras: cameras without ``motion`` settings are always detected.

    Cameras are added and removed on the edge's loop thread (before a camera's first frame, after its last);
    :meth:`needs_detection` runs on the detector threads, one at a time per camera (under the pool's take lock or the
    camera's claim).

    Args:
        on_skip: called with the camera's name for every still frame (counts the skip).
    """

    def __init__(self, on_skip: Callable[[str], None] | None = None) -> None:
        self._gates: dict[str, MotionGate] = {}
        self._lock = threading.Lock()
        self._on_skip = on_skip

    def add(self, camera: str, cfg: MotionConfig | None) -> None:
        """Gate ``camera`` with ``cfg`` (None: detect every frame); a camera added again starts afresh."""
        with self._lock:
            self._gates.pop(camera, None)
            if cfg is not None:
                self._gates[camera] = MotionGate(cfg)

    def remove(self, camera: str) -> None:
        """Forget ``camera``'s gate (nothing if it had none)."""
        with self._lock:
            self._gates.pop(camera, None)

    def needs_detection(self, camera: str, image: np.ndarray, stream_ts_ms: float) -> bool:
        """True if ``camera``'s frame goes through the detector (:meth:`MotionGate.needs_detection`); always True
        for a camera without a gate. A still frame is counted (``on_skip``)."""
        with self._lock:
            gate = self._gates.get(camera)
        if gate is None or gate.needs_detection(image, stream_ts_ms):
            return True
        if self._on_skip is not None:
            self._on_skip(camera)
        return False

"""Frames and the per-camera frame slots between camera readers and the detector.

Frame-drop policy (DESIGN.md, "Lessons": selectable frame policies, every dropped frame reported):

* ``every_frame`` (video files, batch processing): a camera's slot holds up to ``depth`` frames and the reader
  waits when it is full, so the detector sees every frame and decoding is paced by detection.
* ``newest`` (live sources, and files with ``realtime: true``): the slot holds one frame; a newer frame replaces an unconsumed one, which is
  counted as *skipped*. Frame age therefore stays bounded however slow the detector is.

The detector takes frames round-robin across cameras, so one fast camera cannot starve the others. Frames
taken with ``hold=True`` (the edge's :class:`~edge.detect_pool.DetectorPool`) still count as queued until they
are released after tracking, so a camera is not forgotten while one of its frames is being detected.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

FramePolicy = Literal["every_frame", "newest"]


@dataclass(frozen=True)
class Frame:
    """One decoded frame.

    Attributes:
        camera: camera name.
        seq: index of the frame among the frames decoded from this camera, from 0.
        image: (H, W, 3) uint8 BGR pixels.
        stream_ts_ms: presentation timestamp (PTS) in the stream, ms from the stream's start, as FFmpeg reports it
            (a stream without timestamps: from its frame durations or rate, see :mod:`vcascade.edge.av_reader`),
            never index / fps; correct for variable frame rate.
            It restarts near 0 after a live camera reconnects; a ``loop: true`` file keeps it increasing.
        capture_s: ``time.perf_counter()`` when the reader got the frame (the edge's monotonic clock); for a
            ``realtime: true`` file, when the frame was released at its PTS pace.
        capture_unix_ms: wall-clock time when the reader got the frame, ms since the Unix epoch.
    """

    camera: str
    seq: int
    image: np.ndarray
    stream_ts_ms: float
    capture_s: float
    capture_unix_ms: float


class FrameSlots:
    """Per-camera frame slots with a frame-drop policy, shared by camera reader threads and one detector.

    Thread-safe. Readers call :meth:`put`; the detector calls :meth:`take`. One lock, two wait conditions: the
    detector waits for a frame (``_ready``), ``every_frame`` readers for room in their slot (``_room``), so a frame
    put wakes only the detector and a frame taken only the readers, never every reader of the edge.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._slots: dict[str, deque[Frame]] = {}
        self._policy: dict[str, FramePolicy] = {}
        self._open: set[str] = set()
        self._order: list[str] = []
        self._next = 0
        self._held: dict[str, int] = {}
        self.skipped: dict[str, int] = {}

    def add_camera(self, camera: str, policy: FramePolicy, depth: int = 2) -> None:
        """Register a camera before its reader starts. ``depth`` applies to ``every_frame`` (newest keeps 1)."""
        with self._lock:
            self._slots[camera] = deque(maxlen=1 if policy == "newest" else depth)
            self._policy[camera] = policy
            self._open.add(camera)
            self._order.append(camera)
            self.skipped[camera] = 0

    def put(self, frame: Frame, stop: threading.Event) -> bool:
        """Hand a frame to the detector.

        ``every_frame``: waits while the slot is full (returns False if ``stop`` is set meanwhile).
        ``newest``: never waits; an unconsumed older frame is replaced and counted in :attr:`skipped`.

        Returns:
            True when the frame was stored.
        """
        with self._lock:
            slot = self._slots[frame.camera]
            if self._policy[frame.camera] == "newest":
                if slot:
                    self.skipped[frame.camera] += 1
                slot.append(frame)
            else:
                while len(slot) == slot.maxlen:
                    if stop.is_set():
                        return False
                    self._room.wait(0.1)
                slot.append(frame)
            self._ready.notify()  # the one detector thread
            return True

    def close(self, camera: str) -> None:
        """The camera's reader has finished (end of file, or failed); frames already queued are still taken."""
        with self._lock:
            self._open.discard(camera)
            self._ready.notify_all()

    def remove_camera(self, camera: str) -> int:
        """Forget a camera removed at run time (its reader has finished). Returns its queued frames, discarded."""
        with self._lock:
            discarded = len(self._slots.pop(camera, ()))
            self._policy.pop(camera, None)
            self._open.discard(camera)
            self.skipped.pop(camera, None)
            self._held.pop(camera, None)
            if camera in self._order:
                index = self._order.index(camera)
                self._order.remove(camera)
                if self._next > index:
                    self._next -= 1  # keep the round-robin position of the other cameras
            self._ready.notify_all()
            self._room.notify_all()
            return discarded

    def queued(self, camera: str) -> int:
        """Frames of ``camera`` waiting for the detector or held by it (0 for an unknown camera)."""
        with self._lock:
            return len(self._slots.get(camera, ())) + self._held.get(camera, 0)

    def finished(self) -> bool:
        """True when every camera is closed and every queued frame has been taken (and released, if held)."""
        with self._lock:
            return not self._open and not any(self._slots.values()) and not any(self._held.values())

    def release(self, frames: list[Frame]) -> None:
        """Frames taken with ``hold=True`` are done (detected and tracked)."""
        with self._lock:
            for frame in frames:
                if frame.camera in self._held:
                    self._held[frame.camera] -= 1

    def take(self, timeout_s: float) -> Frame | None:
        """The next frame, round-robin across cameras; None if none arrives within ``timeout_s``."""
        frames = self.take_many(1, timeout_s)
        return frames[0] if frames else None

    def take_many(self, max_frames: int, timeout_s: float, hold: bool = False) -> list[Frame]:
        """Up to ``max_frames`` frames for one batched detector run, at most one per camera, round-robin.

        Waits up to ``timeout_s`` for the first frame, never for more: a batch holds what is ready now, so
        batching adds no latency. Returns an empty list if nothing arrives in time (or all cameras closed).
        ``hold``: the frames count in :meth:`queued` and :meth:`finished` until :meth:`release`.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                frames = []
                for _ in range(len(self._order)):
                    if len(frames) == max_frames:
                        break
                    camera = self._order[self._next % len(self._order)]
                    self._next += 1
                    if self._slots[camera]:
                        frames.append(self._slots[camera].popleft())
                        if hold:
                            self._held[camera] = self._held.get(camera, 0) + 1
                if frames:
                    self._room.notify_all()
                    return frames
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self._open):
                    return []
                self._ready.wait(remaining)

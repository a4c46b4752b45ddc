"""Frames and the per-camera frame slots between camera readers and the detector.

Frame-drop policy (DESIGN.md, "Lessons": selectable frame policies, every dropped frame reported):

* ``every_frame`` (video files, batch processing): a camera's slot holds up to ``depth`` frames and the reader
  waits when it is full, so the detector sees every frame and decoding is paced by detection.
* ``newest`` (live sources, and files with ``realtime: true``): the slot holds one frame; a newer frame replaces an unconsumed one, which is
  counted as *skipped*. Frame age therefore stays bounded however slow the detector is.

An ``every_frame`` camera may instead lend its slot its frames to pull (:meth:`FrameSlots.attach`: a file read by
the detector's threads themselves, :mod:`vcascade.edge.capture.pull`): its slot stays empty and the taker that
comes to it claims the camera and decodes its next frame (:class:`Claim`), one taker per camera at a time.

The detector takes frames round-robin across cameras, so one fast camera cannot starve the others. Frames
taken with ``hold=True`` (the edge's :class:`~edge.detection.pool.DetectorPool`) still count as queued until they
are released after tracking, so a camera is not forgotten while one of its frames is being detected.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

FramePolicy = Literal["every_frame", "newest"]

WAKE_AFTER_FRAMES = 2
"""Frames queued (all cameras) before an ``every_frame`` put wakes a waiting detector thread. Files are batch
work, so a frame may wait for the next one (or for its slot to fill, its reader to close, or the taker's timeout):
a detector faster than decoding is then woken once per two frames instead of once per frame, half the thread
switches of the hand-off. ``newest`` frames (live sources) always wake it at once."""


@dataclass(frozen=True)
class Frame:
    """One decoded frame.

    Attributes:
        camera: camera name.
        seq: index of the frame among the frames decoded from this camera, from 0.
        image: (H, W, 3) uint8 BGR pixels.
        stream_ts_ms: presentation timestamp (PTS) in the stream, ms from the stream's start, as FFmpeg reports it
            (a stream without timestamps: from its frame durations or rate, see :mod:`vcascade.edge.capture.av_reader`),
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

    def __init__(
        self, camera: str, seq: int, image: np.ndarray, stream_ts_ms: float, capture_s: float, capture_unix_ms: float,
    ) -> None:
        # One frame per decoded frame of every camera: the fields are set in one dict update instead of the six
        # object.__setattr__ calls of a frozen dataclass's generated __init__ (1.3 -> 0.7 us on the 2-core test
        # machine). The instance stays frozen: assigning a field afterwards raises FrozenInstanceError.
        self.__dict__.update(camera=camera, seq=seq, image=image, stream_ts_ms=stream_ts_ms, capture_s=capture_s,
                             capture_unix_ms=capture_unix_ms)


class FrameSource(Protocol):
    """A camera's frames decoded on demand (:class:`vcascade.edge.capture.pull.PulledFrames`)."""

    done: threading.Event

    def pull(self) -> Frame | None:
        """The camera's next frame, decoded on the calling thread; None once the frames have ended."""


class Claim:
    """A taker's turn to decode one frame of a camera whose frames are pulled (:meth:`FrameSlots.attach`).

    :meth:`pull` decodes the frame on the calling thread; :meth:`release` ends the turn (and, for a take with
    ``hold``, holds the frame). Between the two the camera is this taker's alone, so what must follow the
    camera's frames in order (the motion gate) is asked there.
    """

    __slots__ = ("camera", "_slots", "_source", "_hold")

    def __init__(self, slots: FrameSlots, camera: str, source: FrameSource, hold: bool) -> None:
        self._slots, self.camera, self._source, self._hold = slots, camera, source, hold

    def pull(self) -> Frame | None:
        """The camera's next frame (None: its frames have ended)."""
        return self._source.pull()

    def release(self, frame: Frame | None) -> None:
        """The turn is over; ``frame`` is what :meth:`pull` gave."""
        self._slots._end_claim(self.camera, self._source, self._hold and frame is not None)


@dataclass
class Taken:
    """What one take gives: frames ready in the slots and claims on cameras whose next frame the taker decodes
    itself (at most one of either per camera, ``max_frames`` together)."""

    frames: list[Frame] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.frames or self.claims)

    def pull(self, on_pulled: Callable[[Frame], None] | None = None) -> list[Frame]:
        """The ready frames, then one frame of each claimed camera decoded on this thread, every claim released.
        ``on_pulled(frame)`` is called for each pulled frame before its claim ends (in the camera's frame order)."""
        frames = list(self.frames)
        for claim in self.claims:
            frame = None
            try:
                frame = claim.pull()
                if frame is not None:
                    if on_pulled is not None:
                        on_pulled(frame)
                    frames.append(frame)
            finally:
                claim.release(frame)
        return frames


class FrameSlots:
    """Per-camera frame slots with a frame-drop policy, shared by camera reader threads and the detector threads.

    Thread-safe. Readers call :meth:`put`; the detector threads call :meth:`take` / :meth:`take_many`. One lock
    guards the slots. The hand-off happens once per frame, so its waits are cheap ones:

    * A detector thread with nothing to take registers as waiting and blocks on a wake token
      (``queue.SimpleQueue``, implemented in C); a put while a thread waits posts one token, so it wakes one
      detector thread, and a put while none waits costs no wake at all (``threading.Condition``'s wait and notify
      are pure Python: a lock allocated per wait, a deque of waiters). A token left by a thread that timed out
      meanwhile only makes a later wait look again early. An ``every_frame`` put wakes it only once
      :data:`WAKE_AFTER_FRAMES` frames are queued or its slot is full; a take that leaves frames queued wakes the
      next waiting thread.
    * An ``every_frame`` reader waits for room in its slot on its camera's own condition, which a take from that
      camera notifies only while its reader waits: a frame taken wakes at most the one reader it made room for,
      never every blocked reader of the edge.
    * A camera whose frames are pulled (:meth:`attach`) has no hand-off at all: the taker decodes the frame.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._takers_waiting = 0
        self._ready = 0  # frames in the slots, all cameras (counted, not summed: a put must not scan every camera)
        self._room: dict[str, threading.Condition] = {}
        self._blocked: set[str] = set()
        self._slots: dict[str, deque[Frame]] = {}
        self._policy: dict[str, FramePolicy] = {}
        self._open: set[str] = set()
        self._order: list[str] = []
        self._next = 0
        self._held: dict[str, int] = {}
        self._sources: dict[str, FrameSource] = {}  # cameras whose frames are pulled (attach)
        self._idle: set[str] = set()  # of those, the cameras no taker is decoding now
        self._claimed: set[str] = set()  # and those a taker is decoding now
        self.skipped: dict[str, int] = {}

    def add_camera(self, camera: str, policy: FramePolicy, depth: int = 2) -> None:
        """Register a camera before its reader starts. ``depth`` applies to ``every_frame`` (newest keeps 1)."""
        with self._lock:
            self._slots[camera] = deque(maxlen=1 if policy == "newest" else depth)
            self._room[camera] = threading.Condition(self._lock)
            self._policy[camera] = policy
            self._open.add(camera)
            self._order.append(camera)
            self.skipped[camera] = 0

    def put(self, frame: Frame, stop: threading.Event) -> bool:
        """Hand a frame to the detector.

        ``every_frame``: waits while the slot is full (returns False if ``stop`` is set meanwhile); wakes a
        waiting detector thread once :data:`WAKE_AFTER_FRAMES` frames are queued or the slot is full.
        ``newest``: never waits; an unconsumed older frame is replaced and counted in :attr:`skipped`; wakes a
        waiting detector thread at once.

        Returns:
            True when the frame was stored.
        """
        with self._lock:
            slot = self._slots[frame.camera]
            if self._policy[frame.camera] == "newest":
                if slot:
                    self.skipped[frame.camera] += 1
                else:
                    self._ready += 1
                slot.append(frame)
                wake = True
            else:
                while len(slot) == slot.maxlen:
                    if stop.is_set() or frame.camera not in self._slots:
                        return False
                    self._blocked.add(frame.camera)
                    self._room[frame.camera].wait(0.1)
                    self._blocked.discard(frame.camera)
                slot.append(frame)
                self._ready += 1
                wake = self._ready >= WAKE_AFTER_FRAMES or len(slot) == slot.maxlen
            if wake:
                self._wake_one_taker()
            return True

    def attach(self, camera: str, source: FrameSource) -> None:
        """Takers decode ``camera``'s frames from ``source`` themselves, one taker at a time, until :meth:`detach`
        (an ``every_frame`` camera with an empty slot: its reader puts nothing meanwhile)."""
        with self._lock:
            self._sources[camera] = source
            self._idle.add(camera)
            self._wake_all_takers()

    def detach(self, camera: str) -> None:
        """No taker decodes ``camera``'s frames after this returns: it waits for a pull in progress to end."""
        with self._lock:
            self._idle.discard(camera)
            self._sources.pop(camera, None)
            while camera in self._claimed and camera in self._room:
                self._room[camera].wait(0.1)

    def close(self, camera: str) -> None:
        """The camera's reader has finished (end of file, or failed); frames already queued are still taken."""
        with self._lock:
            self._open.discard(camera)
            self._wake_all_takers()

    def remove_camera(self, camera: str) -> int:
        """Forget a camera removed at run time (its reader has finished). Returns its queued frames, discarded."""
        with self._lock:
            discarded = len(self._slots.pop(camera, ()))
            self._ready -= discarded
            self._policy.pop(camera, None)
            self._open.discard(camera)
            self.skipped.pop(camera, None)
            self._held.pop(camera, None)
            self._sources.pop(camera, None)
            self._idle.discard(camera)
            if camera in self._order:
                index = self._order.index(camera)
                self._order.remove(camera)
                if self._next > index:
                    self._next -= 1  # keep the round-robin position of the other cameras
            self._wake_all_takers()
            room = self._room.pop(camera, None)
            if room is not None:
                room.notify_all()
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
        ``hold``: the frames count in :meth:`queued` and :meth:`finished` until :meth:`release`. A camera whose
        frames are pulled has its next frame decoded here, on the calling thread (:meth:`take_batch`).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            frames = self.take_batch(max_frames, max(0.0, deadline - time.monotonic()), hold).pull()
            if frames or time.monotonic() >= deadline or not self._open:
                return frames

    def take_batch(self, max_frames: int, timeout_s: float, hold: bool = False) -> Taken:
        """Up to ``max_frames`` frames ready and claims on cameras whose frames are pulled, at most one per
        camera, round-robin; the caller pulls the claims (:meth:`Taken.pull`, or each :class:`Claim`), on its
        own thread, outside any lock of its own that other takers need.

        Waits up to ``timeout_s`` for the first frame or claim, never for more. An empty :class:`Taken` if
        nothing comes in time (or all cameras closed). ``hold``: as :meth:`take_many`.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                taken = self._take_ready(max_frames, hold)
                if taken:
                    if self._ready or self._idle:  # frames or cameras left: pass the wake on
                        self._wake_one_taker()
                    return taken
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._open:
                    return taken
                self._takers_waiting += 1
            try:
                self._wake.get(timeout=remaining)  # a token: something was put (or closed); look again
            except queue.Empty:
                with self._lock:  # no token came: withdraw (a token posted meanwhile wakes a later wait early)
                    self._takers_waiting = max(0, self._takers_waiting - 1)

    def _take_ready(self, max_frames: int, hold: bool) -> Taken:
        """Up to ``max_frames`` queued frames and claims, at most one per camera, round-robin from the last
        position."""
        taken = Taken()
        frames, claims = taken.frames, taken.claims
        for _ in range(len(self._order)):
            if len(frames) + len(claims) == max_frames:
                break
            camera = self._order[self._next % len(self._order)]
            self._next += 1
            slot = self._slots[camera]
            if slot:
                frames.append(slot.popleft())
                self._ready -= 1
                if hold:
                    self._held[camera] = self._held.get(camera, 0) + 1
                if camera in self._blocked:  # its reader waits for the room just made
                    self._room[camera].notify()
            elif camera in self._idle:
                self._idle.discard(camera)
                self._claimed.add(camera)
                claims.append(Claim(self, camera, self._sources[camera], hold))
        return taken

    def _end_claim(self, camera: str, source: FrameSource, held: bool) -> None:
        """A claim on ``camera`` ended (:meth:`Claim.release`); ``held``: its frame is held."""
        with self._lock:
            self._claimed.discard(camera)
            if held and camera in self._slots:
                self._held[camera] = self._held.get(camera, 0) + 1
            if self._sources.get(camera) is source and not source.done.is_set():
                self._idle.add(camera)
                self._wake_one_taker()
            else:  # ended or detached: the session waits in detach, or for its frames to end
                room = self._room.get(camera)
                if room is not None:
                    room.notify_all()

    def _wake_one_taker(self) -> None:
        """Wake one waiting detector thread, if any waits (the lock is held)."""
        if self._takers_waiting:
            self._takers_waiting -= 1
            self._wake.put(None)

    def _wake_all_takers(self) -> None:
        """Wake every waiting detector thread (a camera closed or was removed: ``finished`` may have changed)."""
        for _ in range(self._takers_waiting):
            self._wake.put(None)
        self._takers_waiting = 0

"""Stream-time rules of a camera: detection rate, realtime pacing of files, and frames missing from the stream.

All work on the stream's timestamps in ms, never on frame index / fps, so variable-frame-rate video is handled as
it is: the rate gate and the pacer on presentation timestamps (``Frame.stream_ts_ms``), the gap rule on packet
decode timestamps (:mod:`vcascade.edge.capture.av_reader` feeds it).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

PTS_TOLERANCE_MS = 0.5
"""Slack for float rounding of PTS (FFmpeg converts time-base ticks to ms)."""
GAP_WINDOW = 16
"""Number of recent DTS steps whose median is the stream's current frame interval."""
GAP_SLACK = 1.5
"""Recent steps steady (constant rate): a step above this many intervals is long (time-base rounding stays below)."""
GAP_FACTOR = 4.0
"""Recent steps varying (variable rate): a step above this many times their median is long."""
STEADY_MS = 1.0
"""Recent steps within this many ms of each other are a constant rate, ms."""


class RateGate:
    """Lets through at most ``fps`` frames per second of stream time (``detect_fps``).

    The first frame passes; then a frame passes when its PTS reaches the next due time, and the due time
    advances by exactly ``1000 / fps`` ms, so the average rate is ``fps`` whatever the stream rate (a stream
    slower than ``fps`` passes every frame). PTS going backwards (reconnect, loop) starts afresh.

    Raises:
        ValueError: ``fps`` is not positive.
    """

    def __init__(self, fps: float) -> None:
        if fps <= 0:
            raise ValueError(f"detect_fps must be positive, got {fps}")
        self.period_ms = 1000.0 / fps
        self._due_ms: float | None = None
        self._last_ms: float | None = None

    def accept(self, pts_ms: float) -> bool:
        """True if the frame with this PTS (ms) goes to the detector."""
        if self._last_ms is not None and pts_ms < self._last_ms:
            self._due_ms = None
        self._last_ms = pts_ms
        if self._due_ms is not None and pts_ms < self._due_ms - PTS_TOLERANCE_MS:
            return False
        behind = self._due_ms is None or pts_ms - self._due_ms >= self.period_ms
        self._due_ms = pts_ms + self.period_ms if behind else self._due_ms + self.period_ms
        return True


class Pacer:
    """Waits so that frames are released at the pace of their PTS (``realtime: true`` files).

    The first frame is released at once; frame ``i`` at ``start + (pts_i - pts_0) / 1000`` s. A reader that falls
    behind does not sleep (it never tries to catch up by bursting either: it simply releases at once). With
    ``resync_s``, a frame that comes more than ``resync_s`` late (a live playlist's segment that arrived late)
    starts the pace again from itself, so the frames after it are paced, not released as a burst.
    """

    def __init__(self, resync_s: float | None = None) -> None:
        self._origin: tuple[float, float] | None = None
        self.resync_s = resync_s

    def wait(self, pts_ms: float, cancel: threading.Event) -> bool:
        """Sleep until the frame with ``pts_ms`` is due. Returns False if ``cancel`` was set meanwhile."""
        now_s = time.perf_counter()
        if self._origin is None or pts_ms < self._origin[1]:
            self._origin = (now_s, pts_ms)
            return not cancel.is_set()
        due_s = self._origin[0] + (pts_ms - self._origin[1]) / 1000.0
        if self.resync_s is not None and now_s - due_s > self.resync_s:
            self._origin = (now_s, pts_ms)
            return not cancel.is_set()
        return not cancel.wait(max(0.0, due_s - now_s))


class PacketGaps:
    """Frames missing from a stream, found on its packets' decode timestamps (DTS) by the stream's own durations.

    The stream's current frame interval is the median of its last :data:`GAP_WINDOW` DTS steps. A step is *long*
    above :data:`GAP_SLACK` x that interval when those steps were steady (constant rate), above :data:`GAP_FACTOR`
    x when they varied (variable rate). A long step is judged by the step after it: back to the interval, it was
    a gap (``round(step / interval) - 1`` frames missing: packets lost on a link, a recorder that dropped frames);
    long again, the stream changed its frame rate (the step joins the window, nothing is counted). So a variable
    frame rate (40 ms then 200 ms frames) is never loss, and a gap is counted one packet late. Declared packet
    durations are not used: MP4 derives them from the same timestamps, MPEG-TS parsers from a nominal rate.
    """

    def __init__(self) -> None:
        self._last_ms: float | None = None
        self._steps: deque[float] = deque(maxlen=GAP_WINDOW)
        self._pending: tuple[float, float] | None = None  # (long step, interval before it), ms

    def observe(self, ts_ms: float) -> int:
        """Record a packet's DTS, ms. Returns the frames found missing (before the previous packet), usually 0."""
        last, self._last_ms = self._last_ms, ts_ms
        if last is None or ts_ms <= last:
            return 0
        step, missing = ts_ms - last, 0
        if self._pending is not None:
            long_step, interval = self._pending
            self._pending = None
            if step <= GAP_SLACK * interval:
                missing = max(1, round(long_step / interval) - 1)
            else:
                self._steps.append(long_step)  # a new frame rate: learn it
        if len(self._steps) >= 3 and step > GAP_SLACK * min(self._steps):  # cheap pre-check: median >= min
            interval = statistics.median(self._steps)
            steady = max(self._steps) - min(self._steps) <= STEADY_MS
            if step > (GAP_SLACK if steady else GAP_FACTOR) * interval:
                self._pending = (step, interval)
                return missing
        self._steps.append(step)
        return missing


RESTART_MS = 1000.0
"""A PTS this far (ms) or more behind the previous frame's is a restart of the stream's timeline (concatenated
MPEG-TS, a camera or server that reset its clock), not a late frame: a decoder's reordering delay is a few frames,
far below a second."""
MONOTONIC_STEP_MS = 0.001
"""A frame whose timestamp would not be after the previous one is placed this far (ms) after it, so that the
camera's timestamps never repeat (the frame is still counted ``pts_not_increasing`` by the decoder)."""


def is_restart(previous_ms: float, pts_ms: float) -> bool:
    """True when ``pts_ms`` (a frame's PTS, ms) is a restart of the timeline after ``previous_ms`` (see
    :data:`RESTART_MS`)."""
    return pts_ms <= previous_ms - RESTART_MS


class Timeline:
    """One camera's ``stream_ts_ms`` across sessions: never backwards, never repeated.

    Each stream (a connection, a loop of a file) has its own PTS origin; the timeline places them one after the
    other. The camera's first frame keeps its PTS (moved to 0 if negative). A new segment (:meth:`new_segment`:
    a reconnect, a loop) or a PTS restart inside a stream (:func:`is_restart`) continues after the last frame: one
    frame interval later for files, and for live sources by the time that really passed (the wall-clock time since
    the last frame, at least one interval), so a 5 s outage is a 5 s step. Each such join except a planned loop
    is a *discontinuity* (:attr:`discontinuities`): time that the stream's own clock does not account for,
    counted, never taken for lost frames.

    Attributes:
        discontinuities: reconnects and PTS restarts joined so far.
    """

    def __init__(self, live: bool) -> None:
        self.live = live
        self.discontinuities = 0
        self._offset_ms = 0.0
        self._last_ms: float | None = None
        self._last_raw_ms: float | None = None
        self._last_s = 0.0
        self._step_ms = 40.0
        self._segment: str | None = None

    def new_segment(self, why: str) -> None:
        """The next frame starts a new stream: ``why`` is ``reconnect`` (counted) or ``loop`` (not counted)."""
        self._segment = why

    def place(self, raw_ms: float, now_s: float) -> float:
        """The camera's timestamp (ms) of a frame with stream PTS ``raw_ms`` (ms) decoded at ``now_s``
        (``time.perf_counter()``, s)."""
        if self._last_ms is None:
            self._offset_ms = max(0.0, -raw_ms)
        elif self._segment is not None or is_restart(self._last_raw_ms, raw_ms):
            if self._segment != "loop":
                self.discontinuities += 1
            gap_ms = max(self._step_ms, (now_s - self._last_s) * 1000.0) if self.live else self._step_ms
            self._offset_ms = self._last_ms + gap_ms - raw_ms
        elif raw_ms > self._last_raw_ms:
            self._step_ms = raw_ms - self._last_raw_ms
        self._segment = None
        placed_ms = raw_ms + self._offset_ms
        if self._last_ms is not None and placed_ms <= self._last_ms:
            placed_ms = self._last_ms + MONOTONIC_STEP_MS
        self._last_ms, self._last_raw_ms, self._last_s = placed_ms, raw_ms, now_s
        return placed_ms

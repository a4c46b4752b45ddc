"""Stream-time (PTS) rules of a camera: detection rate and realtime pacing of files.

Both work on the stream's presentation timestamps in ms (``Frame.stream_ts_ms``), never on frame index / fps, so
variable-frame-rate video is handled as it is. Frames lost or broken are found by the decoder
(:mod:`vcascade.edge.av_reader`).
"""

from __future__ import annotations

import threading
import time

PTS_TOLERANCE_MS = 0.5
"""Slack for float rounding of PTS (FFmpeg converts time-base ticks to ms)."""


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
    behind does not sleep (it never tries to catch up by bursting either: it simply releases at once).
    """

    def __init__(self) -> None:
        self._origin: tuple[float, float] | None = None

    def wait(self, pts_ms: float, cancel: threading.Event) -> bool:
        """Sleep until the frame with ``pts_ms`` is due. Returns False if ``cancel`` was set meanwhile."""
        now_s = time.perf_counter()
        if self._origin is None or pts_ms < self._origin[1]:
            self._origin = (now_s, pts_ms)
            return not cancel.is_set()
        due_s = self._origin[0] + (pts_ms - self._origin[1]) / 1000.0
        return not cancel.wait(max(0.0, due_s - now_s))

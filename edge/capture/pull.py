"""A file camera's frames decoded on the thread that takes them: no hand-off between a decoding thread and the
detector's for batch work.

An ``every_frame`` camera reading a file (not followed while written, not paced) does not decode ahead on its
capture thread: its session lends the slots a :class:`PulledFrames` and waits, and the detector thread that takes
the camera's next frame decodes it there and then (:meth:`vcascade.edge.capture.frames.FrameSlots.take_batch`,
a ``Claim``), one frame ahead; the first frame is decoded by the session itself (:meth:`PulledFrames.prime`). A
file is batch work: nothing is gained by decoding further ahead of the detector, and a frame decoded on the
taker's thread costs no thread wake and no GIL hand-over (docs/BENCHMARKS.md, "The goal
decided on CPU time per frame"). Live sources, paced files and followed files keep their capture thread: their
frames come at the source's pace, and a read may wait for the network or a writer, which must never hold a
detector thread.

Everything else is the session's as before: the same generator of frames (:meth:`CaptureSession.frames
<vcascade.edge.capture.session.CaptureSession>`) does the decoding, the bookkeeping and the phases the watchdog
reads; its end, its return value (the session's outcome) and any exception it raises are handed back to the
session's thread, which handles them as if it had decoded itself. FFmpeg's log lines of a pull go to the
camera's :class:`~vcascade.edge.capture.ffmpeg_log.CameraLog`.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Generic, TypeVar

from vcascade.edge.capture.ffmpeg_log import CameraLog
from vcascade.edge.capture.frames import Frame

Result = TypeVar("Result")


class PulledFrames(Generic[Result]):
    """A camera's frames, decoded by whichever thread calls :meth:`pull` (one at a time: the frame slots give a
    camera to one taker at once), one frame ahead.

    Args:
        frames: the session's frame generator; its return value is the session's :attr:`result`.
        ffmpeg_log: the camera's FFmpeg log; a pull captures the lines of its own thread into it.

    Attributes:
        done: set once the generator has ended, returned or raised (or was closed).
        result: the generator's return value once it returned.
        error: the exception it raised, to be raised again on the session's thread; else None.
    """

    def __init__(self, frames: Generator[Frame, None, Result], ffmpeg_log: CameraLog) -> None:
        self._frames, self._log = frames, ffmpeg_log
        self._next: Frame | None = None
        self._started = False
        self.done = threading.Event()
        self._wake = threading.Event()  # done, or interrupted (the session was cancelled)
        self.result: Result | None = None
        self.error: Exception | None = None

    def prime(self) -> None:
        """Decode the first frame on this thread (the session's, before the frames are lent): a source that fails
        on its first frame (a privacy mask outside it...) fails now, whether or not a detector thread comes."""
        if not self._started:
            self._started = True
            self._advance()

    def pull(self) -> Frame | None:
        """The camera's next frame, and the one after it decoded on this thread (None once the frames have ended,
        see :attr:`done`). One frame is decoded ahead so that the end of the frames (end of file, ``max_frames``,
        an error) is known when the last frame is handed over, as when a capture thread puts it into the slot."""
        self.prime()
        frame, self._next = self._next, None
        if frame is not None:
            self._advance()
        return frame

    def _advance(self) -> None:
        """Decode the next frame into ``_next``, or end: the generator's return value or exception kept."""
        try:
            with self._log.on_this_thread():
                self._next = next(self._frames)
                return
        except StopIteration as end:
            self.result = end.value
        except Exception as exc:  # noqa: BLE001 - the session's to handle, on its own thread
            self.error = exc
        except BaseException:
            self._end()
            raise
        self._end()

    def _end(self) -> None:
        self.done.set()
        self._wake.set()

    def wait(self, cancel: threading.Event, backstop_s: float = 1.0) -> bool:
        """Wait until the frames have ended (True) or ``cancel`` is set (False). A cancel wakes the wait through
        :meth:`interrupt`; ``backstop_s`` bounds the wait for a cancel set just before the frames were lent."""
        while not cancel.is_set():
            if self._wake.wait(backstop_s) and self.done.is_set():
                return True
        return False

    def interrupt(self) -> None:
        """Wake :meth:`wait` (its session was cancelled)."""
        self._wake.set()

    def close(self) -> None:
        """Close the generator (no pull may run: the slots no longer hold it); a frame decoded ahead is dropped."""
        self._next = None
        self._frames.close()
        self._end()

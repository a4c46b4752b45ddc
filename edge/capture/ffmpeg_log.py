"""FFmpeg's own log lines, routed into Python logging with the camera's name, at DEBUG, and counted.

FFmpeg (inside PyAV) never writes to the terminal: :func:`route_ffmpeg_logs` installs PyAV's log callback at
FFmpeg's WARNING level (errors and warnings reach Python; FFmpeg's INFO chatter is not even formatted) and stops
PyAV's ``libav`` logger from propagating to the root logger. Each camera session captures the lines FFmpeg emits
on its own thread (:class:`CameraLog`, PyAV's thread-local ``av.logging.Capture``), and on a detector thread while it
decodes the camera's next frame (:meth:`CameraLog.on_this_thread`, a file camera's pulled frames), and re-logs them on
``vcascade.edge.ffmpeg`` at DEBUG as ``camera NAME: [component] message``; lines from threads that belong to no
session (FFmpeg's own worker threads) are re-logged the same way with camera ``-``. Every line is counted in
``vcascade_edge_ffmpeg_log_lines_total{edge,camera,level}``.
"""

from __future__ import annotations

import logging
import threading
from typing import Self

import av.logging

from vcascade.core.redact import redact_url
from vcascade.edge.metrics import count_ffmpeg_log_line

log = logging.getLogger("vcascade.edge.ffmpeg")

FFMPEG_LEVELS = {av.logging.PANIC: "panic", av.logging.FATAL: "fatal", av.logging.ERROR: "error",
                 av.logging.WARNING: "warning", av.logging.INFO: "info", av.logging.VERBOSE: "verbose",
                 av.logging.DEBUG: "debug", av.logging.TRACE: "trace"}
"""FFmpeg's numeric log levels (libavutil/log.h) and the word used as the metric's ``level`` label."""

_route_lock = threading.Lock()
_routed = False


class _Unattributed(logging.Handler):
    """Re-logs PyAV's ``libav.*`` records (lines from threads with no capture) at DEBUG, camera ``-``."""

    def __init__(self, edge: str) -> None:
        super().__init__(logging.NOTSET)
        self.edge = edge

    def emit(self, record: logging.LogRecord) -> None:
        level = logging.getLevelName(record.levelno).lower()
        count_ffmpeg_log_line(self.edge, "-", level)
        log.debug("camera -: [%s] %s", record.name.removeprefix("libav."), redact_url(record.getMessage()).strip())


def route_ffmpeg_logs(edge: str) -> None:
    """Route every FFmpeg log line of this process into Python logging (idempotent; first ``edge`` name wins).

    After this, FFmpeg writes nothing to stderr; its warnings and errors reach :class:`CameraLog` or, from
    threads no camera owns, the ``vcascade.edge.ffmpeg`` logger at DEBUG.
    """
    global _routed
    with _route_lock:
        if _routed:
            return
        libav = logging.getLogger("libav")
        libav.propagate = False
        libav.setLevel(logging.DEBUG)
        libav.addHandler(_Unattributed(edge))
        av.logging.set_level(av.logging.WARNING)
        _routed = True


class CameraLog:
    """Captures the FFmpeg lines of one camera session's thread; :meth:`drain` re-logs and counts them.

    Use as a context manager on the thread that opens and decodes. Lines are kept only until the next
    :meth:`drain` (the decoder calls it once per packet), so memory stays bounded.

    Args:
        edge: the edge's name (metric label).
        camera: the camera's name (metric label, log text).
    """

    def __init__(self, edge: str, camera: str) -> None:
        self.edge, self.camera = edge, camera
        self._capture = av.logging.Capture(local=True)
        self._lines: list[tuple[int, str, str]] = []
        self._borrowed: dict[int, _Borrowed] = {}  # per thread that decoded for this camera

    def __enter__(self) -> Self:
        route_ffmpeg_logs(self.edge)
        self._lines = self._capture.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self._capture.__exit__(*exc_info)
        self.drain()

    def on_this_thread(self) -> _Borrowed:
        """A context in which the FFmpeg lines of the calling thread are this camera's: a detector thread decoding
        the camera's next frame (:mod:`vcascade.edge.capture.pull`). One thread at a time; :meth:`drain` reads
        its lines meanwhile, and the lines left are drained when it ends."""
        ident = threading.get_ident()
        borrowed = self._borrowed.get(ident)
        if borrowed is None:  # the capture is made on the thread whose lines it takes (PyAV keys them by thread)
            borrowed = self._borrowed[ident] = _Borrowed(self, av.logging.Capture(local=True))
        return borrowed

    def drain(self) -> list[str]:
        """Re-log (DEBUG) and count the lines captured since the last call. Returns their texts, lower case."""
        if not self._lines:
            return []
        lines, texts = list(self._lines), []
        del self._lines[: len(lines)]
        for level, component, message in lines:
            text = redact_url(message).strip()
            count_ffmpeg_log_line(self.edge, self.camera, FFMPEG_LEVELS.get(level, "other"))
            log.debug("camera %s: [%s] %s", self.camera, component, text)
            texts.append(text.lower())
        return texts


class _Borrowed:
    """:meth:`CameraLog.on_this_thread`'s context: the camera's lines are this thread's capture while it lasts
    (one per thread and camera, entered by one pull at a time)."""

    __slots__ = ("_log", "_capture", "_saved")

    def __init__(self, camera_log: CameraLog, capture: av.logging.Capture) -> None:
        self._log, self._capture = camera_log, capture

    def __enter__(self) -> None:
        self._saved = self._log._lines
        self._log._lines = self._capture.__enter__()

    def __exit__(self, *exc_info) -> None:
        try:
            if self._log._lines:
                self._log.drain()
        finally:
            self._capture.__exit__(*exc_info)
            self._log._lines = self._saved

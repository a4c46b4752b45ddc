"""One connection to a camera: open its source, decode it and hand its frames to the camera's reader.

A :class:`CaptureSession` is the thread that the camera's supervisor (:class:`vcascade.edge.capture.source.CameraReader`)
starts for each connection and watches; it ends with an :data:`Outcome` (the next state, its reason and detail).
HLS playlists (:mod:`vcascade.edge.capture.hls`) are fetched before FFmpeg opens them and asked again at the end of
their stream; followed files (:mod:`vcascade.edge.capture.follow`) end ``writer_idle``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Generator
from typing import Protocol

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.av_reader import StreamDecoder, open_source
from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.capture.ffmpeg_log import CameraLog
from vcascade.edge.capture.frames import Frame, FramePolicy
from vcascade.edge.capture.hls import PACE_RESYNC_S, HlsCamera
from vcascade.edge.capture.kinds import normalize_image
from vcascade.edge.capture.pull import PulledFrames
from vcascade.edge.capture.timing import Pacer, RateGate, Timeline
from vcascade.edge.capture.views import apply_view
from vcascade.edge.privacy.masks import FrameMasks, MaskOutsideFrame

log = logging.getLogger("vcascade.edge.capture.source")

FOLLOW_WAITS = 3
"""Waits of ``follow_idle_s`` a followed file's last read may take: FFmpeg's ``rw_timeout`` ends each read of the
file, but its MP4 demuxer tries again after a failed read (measured: a fragmented MP4 ends 3 x ``rw_timeout``
after its last write, an MPEG-TS after one)."""
FOLLOW_SLACK_S = 2.0
"""And this long (s) more before the watchdog calls a followed file's read stalled."""
Outcome = tuple[str, str, str]
"""How a session ended: (next state, reason, detail)."""
_SESSIONS: weakref.WeakSet[CaptureSession] = weakref.WeakSet()
"""Every capture session of this process, including abandoned ones (see :func:`capture_threads_alive`)."""


class Reader(Protocol):
    """What a session uses of its camera's supervisor (:class:`vcascade.edge.capture.source.CameraReader`, which
    documents each member)."""

    edge: str
    camera: str
    cfg: CameraConfig
    live: bool
    policy: FramePolicy
    hls: HlsCamera | None
    timeline: Timeline
    masks: FrameMasks | None
    frames: int
    loops: int

    def accept(self, session: CaptureSession, frame: Frame) -> Frame | None: ...
    def deliver(self, session: CaptureSession, frame: Frame) -> bool: ...
    def lend(self, session: CaptureSession, frames: PulledFrames[Outcome | None]) -> Outcome | None: ...
    def add_blocked(self, seconds: float) -> None: ...
    def count_corrupt(self, reason: str, n: int) -> None: ...
    def use_decoder(self, decoder: str) -> None: ...
    def count_fallback(self, device: str, reason: str, message: str) -> None: ...


class CaptureSession(threading.Thread):
    """One connection to a camera: open, then decode until end, error, ``max_frames`` or cancel.

    Decoding is :class:`vcascade.edge.capture.av_reader.StreamDecoder` (PyAV); FFmpeg's log lines of this thread go to
    :class:`vcascade.edge.capture.ffmpeg_log.CameraLog` under the camera's name. A file read as batch work
    (``every_frame``, not followed) is decoded by the detector's threads as they take its frames
    (:mod:`vcascade.edge.capture.pull`); this thread opens, waits and closes.

    Attributes:
        cancel: set by the supervisor (:meth:`stop`) to stop or abandon the session; a frame read after it is discarded.
        phase: ``opening``, ``reading``, ``pacing`` (realtime files, HLS), ``delivering`` (waiting on the slot, or
            for a detector thread to want the next frame of a pulled file), ``done``.
        phase_since_s: ``time.perf_counter()`` when the phase began.
        opened: True once the source opened.
        outcome: (next state, reason, detail) once finished; None while running or when abandoned.
        changed: set when the source opens and when the session ends (after :attr:`outcome`), so that the
            supervisor, which waits on it, sees either at once; the supervisor clears it.
        read_timeout_s: the read timeout in force, s: ``read_timeout_s``, or longer for a live HLS playlist
            (:meth:`vcascade.edge.capture.hls.HlsCamera.before_open`) and a followed file (:data:`FOLLOW_WAITS` x
            ``follow_idle_s`` plus :data:`FOLLOW_SLACK_S`); the supervisor's watchdog uses it.
        writer_idle: True when a followed file ended because its writer stopped (reason ``writer_idle``).
        decoded: frames decoded by the current opening of the source.
    """

    def __init__(self, reader: Reader) -> None:
        super().__init__(name=f"capture-{reader.camera}", daemon=True)
        self.reader, self.cfg = reader, reader.cfg
        _SESSIONS.add(self)
        self.cancel = threading.Event()
        self.phase, self.phase_since_s = "opening", time.perf_counter()
        self.opened = False
        self.outcome: Outcome | None = None
        self.changed = threading.Event()
        self.gate = RateGate(self.cfg.detect_fps) if self.cfg.detect_fps else None
        self.pacer = Pacer() if self.cfg.realtime and not reader.live else None
        if reader.hls is not None:  # a playlist's segments come in bursts: paced (edge/capture/hls.py)
            self.pacer = Pacer(resync_s=PACE_RESYNC_S)
        self.read_timeout_s = self.cfg.read_timeout_s
        self.writer_idle = False
        self.decoded = 0
        self._lent: PulledFrames[Outcome | None] | None = None  # a file's frames while the detector pulls them
        reader.timeline.new_segment("reconnect")  # ignored before the camera's first frame

    def stop(self) -> None:
        """Stop or abandon the session: set :attr:`cancel` (and wake its wait for a file's pulled frames)."""
        self.cancel.set()
        lent = self._lent
        if lent is not None:
            lent.interrupt()

    def set_phase(self, phase: str) -> None:
        """Enter a phase (the watchdog times the ``opening`` and ``reading`` phases)."""
        self.phase, self.phase_since_s = phase, time.perf_counter()

    def run(self) -> None:
        try:
            with CameraLog(self.reader.edge, self.reader.camera) as ffmpeg_log:
                outcome = self._open_and_decode(ffmpeg_log)
        except Exception as exc:  # a broken decoder must not take the edge down
            outcome = self._lost("read_error", f"read failed: {type(exc).__name__}: {exc}")
        self.set_phase("done")
        if not self.cancel.is_set():
            self.outcome = outcome
        self.changed.set()

    def _open_and_decode(self, ffmpeg_log: CameraLog) -> Outcome:
        session_frames, hls = 0, self.reader.hls
        while True:
            try:
                cfg, options = self.cfg, None
                if hls is not None:
                    options, self.read_timeout_s = hls.before_open(cfg.open_timeout_s, cfg.read_timeout_s)
                    cfg = cfg.model_copy(update={"read_timeout_s": self.read_timeout_s})
                container, stream = open_source(cfg, self.reader.use_decoder, self.reader.count_fallback, options)
            except CameraFault as fault:
                return self._lost(fault.reason, fault.detail)
            try:
                if self.cancel.is_set():
                    return "ended", "stopped", ""
                self.opened = True
                self.changed.set()
                read_timeout_s = self.read_timeout_s if self.reader.live else None
                decoder = StreamDecoder(container, stream, self.reader.count_corrupt, ffmpeg_log.drain, read_timeout_s)
                if decoder.follow_idle_s is not None:  # a followed file's read waits for its writer: not a stall
                    self.read_timeout_s = max(self.cfg.read_timeout_s,
                                              FOLLOW_WAITS * decoder.follow_idle_s + FOLLOW_SLACK_S)
                outcome, frames = self._decode(decoder, ffmpeg_log)
                self.writer_idle = decoder.writer_idle
            except CameraFault as fault:
                return self._lost(fault.reason, fault.detail)
            finally:
                container.close()
            session_frames += frames
            if outcome is None and hls is not None:
                outcome = hls.at_end(session_frames, self.cfg.open_timeout_s)
            if not (self.cfg.loop and frames and (outcome is None or outcome[1] == "end_of_playlist")):
                return outcome or self._end(session_frames)
            if self.reader.live and (hls is None or hls.playlist is None or not hls.playlist.ended):
                return outcome or self._end(session_frames)  # only files and playlists with an end loop
            self._restart()

    def _decode(self, decoder: StreamDecoder, ffmpeg_log: CameraLog) -> tuple[Outcome | None, int]:
        """Hand the decoder's frames over: pulled by the detector's threads for a file read as batch work
        (:mod:`vcascade.edge.capture.pull`), else put into the slot from this thread. Returns (outcome, frames):
        outcome None at the end of the stream."""
        self.decoded = 0
        frames = self.frames(decoder)
        if self.reader.policy == "every_frame" and decoder.follow_idle_s is None:
            self.set_phase("delivering")  # until a detector thread wants the first frame
            self._lent = PulledFrames(frames, ffmpeg_log)
            try:
                outcome = self.reader.lend(self, self._lent)
            finally:
                self._lent = None
        else:
            outcome = self._push(frames)
        return outcome, self.decoded

    def _push(self, frames: Generator[Frame, None, Outcome | None]) -> Outcome | None:
        """Put every frame into the camera's slot from this thread (live sources, paced and followed files)."""
        while True:
            try:
                frame = next(frames)
            except StopIteration as end:
                return end.value
            if not self.reader.deliver(self, frame):
                frames.close()
                return "ended", "stopped", ""

    def frames(self, decoder: StreamDecoder) -> Generator[Frame, None, Outcome | None]:
        """The frames to hand over, decoded (on whichever thread advances it): each decoded frame stamped, viewed,
        masked and passed through the camera's rate gate and pacer (:meth:`Reader.accept`); phases ``reading``
        while decoding, ``delivering`` until the next frame is wanted (that wait is backpressure, counted as
        blocked time). Counts :attr:`decoded`. Returns the outcome, None at the end of the stream.

        Raises:
            CameraFault: from the decoder, or a privacy mask outside the frame.
        """
        if self.phase == "delivering":  # a pulled file: the wait for its first pull is backpressure too
            self.reader.add_blocked(time.perf_counter() - self.phase_since_s)
        self.set_phase("reading")
        max_frames = self.cfg.max_frames
        for image, pts_ms in decoder.frames():
            if self.cancel.is_set():
                return "ended", "stopped", ""
            self.decoded += 1
            frame = self._frame(image, pts_ms)
            if frame is not None:
                frame = self.reader.accept(self, frame)
            if frame is not None:
                self.phase, self.phase_since_s = "delivering", time.perf_counter()
                yield frame
                now_s = time.perf_counter()
                self.reader.add_blocked(now_s - self.phase_since_s)
                self.phase, self.phase_since_s = "reading", now_s
            else:
                self.set_phase("reading")
            if self.cancel.is_set():
                return "ended", "stopped", ""
            if max_frames is not None and self.reader.frames >= max_frames:
                return "ended", "max_frames", f"max_frames={max_frames} reached"
        return ("ended", "stopped", "") if self.cancel.is_set() else None

    def _frame(self, image, pts_ms: float) -> Frame | None:
        if self.cancel.is_set():  # abandoned: its late frame must not move the camera's timeline
            return None
        now_s, now_unix_ms = time.perf_counter(), time.time() * 1000.0
        pts_ms = self.reader.timeline.place(pts_ms, now_s)
        pixels = normalize_image(image)
        if pixels is None:
            self.reader.count_corrupt("bad_image", 1)
            return None
        if self.cfg.view is not None:
            pixels = apply_view(pixels, self.cfg.view)
        if self.reader.masks is not None:  # before the frame reaches anything else (docs/PRIVACY.md)
            try:
                pixels = self.reader.masks.apply(pixels)
            except MaskOutsideFrame as exc:
                raise CameraFault("privacy_mask_outside_frame", str(exc)) from exc
        return Frame(self.reader.camera, self.reader.frames, pixels, pts_ms, now_s, now_unix_ms)

    def _restart(self) -> None:
        """``loop: true``: the file is opened again; its PTS continue one frame interval after the last one."""
        self.reader.timeline.new_segment("loop")
        self.reader.loops += 1
        log.info("camera %s: end of file, looping (%d)", self.reader.camera, self.reader.loops)

    def _end(self, session_frames: int) -> Outcome:
        if self.reader.live:
            return "stalled", "stream_ended", f"stream ended after {session_frames} frames"
        if self.writer_idle:
            return "ended", "writer_idle", (f"the file was followed while written; no new data for "
                                            f"{self.cfg.follow_idle_s:g} s after {self.reader.frames} frames")
        return "ended", "end_of_file", f"end of file after {self.reader.frames} frames"

    def _lost(self, reason: str, detail: str) -> Outcome:
        if self.reader.live:
            return ("backing_off" if not self.opened else "stalled"), reason, detail
        return "failed", reason, detail


def capture_threads_alive() -> bool:
    """True while a capture session thread of this process still runs, e.g. a read abandoned by the watchdog
    that is still blocked inside FFmpeg. Such a thread must not be unwound by interpreter finalisation (it may
    abort the process inside native code); see :func:`vcascade.app.process_exit.exit_now`.
    """
    return any(session.is_alive() for session in list(_SESSIONS))

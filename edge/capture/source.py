"""Camera readers: one supervisor thread per camera, decoding through a capture session it watches.

Follow one camera: :class:`CameraReader` (the supervisor) starts a :class:`CaptureSession` thread, which opens
the source (:func:`vcascade.edge.capture.av_reader.open_source`, PyAV) and decodes frames
(:class:`vcascade.edge.capture.av_reader.StreamDecoder`) into the shared :class:`FrameSlots`. A live source that opens too
slowly or delivers no data for ``read_timeout_s`` is ended by FFmpeg itself (PyAV's interrupt-callback timeouts): the
session reports ``open_timeout`` or ``read_timeout`` and the camera reconnects after a capped, fully jittered
exponential backoff (:mod:`vcascade.edge.capture.backoff`). The supervisor's watchdog is the backstop: a session still hung
:data:`WATCHDOG_GRACE_S` after its timeout is abandoned (its thread closes the source when FFmpeg returns, and that
frame is discarded). A session waiting because the detector has not taken its frames (``every_frame`` slot full)
is *blocked*, not stalled: it is left alone and the time is counted separately
(``vcascade_edge_camera_blocked_seconds_total``).

Every failure carries its real cause (:data:`vcascade.edge.capture.faults.FAULT_REASONS`): the state reason, the
``reason`` label of ``vcascade_edge_camera_state``, and :attr:`CameraReader.reason` / :attr:`CameraReader.detail`
in the edge's snapshot.

Policies: files give every frame (``every_frame``: decoded by the detector's threads as they take them,
:mod:`vcascade.edge.capture.pull`, except a followed file, decoded ahead on its session's thread), or with
``realtime: true`` are paced by their PTS into a newest-frame slot like a live camera (``loop: true`` starts again
at the end); live sources use the newest-frame slot. ``detect_fps`` thins frames by PTS before the slot. States and reasons:
:mod:`vcascade.edge.capture.state`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url
from vcascade.core.runtime.resources import resolve
from vcascade.edge.capture.av_reader import open_source
from vcascade.edge.capture.backoff import Backoff
from vcascade.edge.capture.faults import FAULT_REASONS, CameraFault
from vcascade.edge.capture.frames import Frame, FramePolicy, FrameSlots
from vcascade.edge.capture.hls import HlsCamera, is_hls
from vcascade.edge.capture.kinds import SourceError, is_live
from vcascade.edge.capture.pull import PulledFrames
from vcascade.edge.capture.session import CaptureSession, Outcome, capture_threads_alive
from vcascade.edge.capture.state import CameraStateMachine
from vcascade.edge.capture.timing import Timeline
from vcascade.edge.metrics import CameraTelemetry
from vcascade.edge.privacy.masks import FrameMasks

__all__ = [
    "CameraReader", "CaptureSession", "SourceError", "capture_threads_alive", "is_live", "open_source", "resolve_or_same",
]

log = logging.getLogger(__name__)

LOOK_INTERVAL_S = 0.2
"""How long at most the supervisor waits between two looks at its session, s: how soon it sees its stop event and
publishes the frame counters. Nothing else waits on it: the session's opening and end wake the supervisor at once
(:attr:`CaptureSession.changed`), and the watchdog wakes at the deadline of an open or a read in progress. Before
3 Dec 2026 the supervisor looked every 50 ms (docs/BENCHMARKS.md, "The supervisor woken by its session")."""
FILE_SLOT_DEPTH = 4
"""Frames an ``every_frame`` camera that decodes on its own thread (a followed file; other files are pulled by the
detector's threads, :mod:`vcascade.edge.capture.pull`) may decode ahead of the detector: absorbs scheduling jitter
between the reader and detector threads (memory: 4 frames per file camera, e.g. 25 MB at 1080p)."""

WATCHDOG_GRACE_S = 2.0
"""A live session is abandoned this long after its open or read timeout if FFmpeg's own timeout has not ended it, s."""
STOP_JOIN_S = 2.0
"""How long a stopping reader waits for its session thread before leaving it behind, s."""



class CameraReader(threading.Thread):
    """Reads one camera into the shared :class:`FrameSlots` until end of file, ``max_frames``, failure or stop.

    Args:
        edge: edge name (metric label).
        name: camera name (metric label, key in ``slots``).
        cfg: the camera's configuration.
        slots: the frame slots shared with the detector; the camera is registered here.
        stop: set to stop reading (the state becomes ``ended``, reason ``stopped``).
        refusal: a fault that keeps the camera from starting (its face model cannot be loaded,
            ``privacy_model_missing``): the reader goes straight to ``failed`` with it and reads nothing.

    Attributes:
        camera: camera name.
        policy: ``every_frame`` (files) or ``newest`` (live sources and ``realtime`` files).
        state: current state (:data:`vcascade.edge.capture.state.STATES`).
        error: why it failed (credentials redacted), else None.
        reason: why it is in its state (see :attr:`reason`).
        fault: the last fault's reason (:data:`FAULT_REASONS`), kept while a live camera retries and after it is
            stopped; None once it streams again.
        detail: the last fault's text (credentials redacted), with the same lifetime.
        frames: frames decoded so far, all sessions together.
        reconnects: reconnect attempts so far.
        blocked_s: seconds spent waiting for the detector to take frames (backpressure).
        rate_skipped: frames not handed over because of ``detect_fps``.
        corrupt_frames: frames counted lost or damaged (see :mod:`vcascade.edge.capture.av_reader`).
        losses: the same by reason (:data:`vcascade.edge.capture.faults.FRAME_LOSS_REASONS`).
        loops: times a ``loop: true`` file started again.
        decoder: the decoder of the last opening: ``software``, ``cuda`` or ``qsv`` (``decoder`` setting).
        decoder_fallbacks: hardware decoders skipped, ``"device:reason"`` -> count.
        timeline: the camera's ``stream_ts_ms`` across reconnects and PTS restarts (never backwards, never repeated;
            ``timeline.discontinuities`` counts the joins, metric ``vcascade_edge_timestamp_discontinuities_total``).
        removal: None, or for a camera removed at run time ``removing`` (reader stopping, ROIs in flight) and
            then ``closed`` (its books are final); set by :class:`vcascade.edge.camera_set.CameraSet`.
        masks: the camera's privacy masks, filled in every frame after its ``view`` (edge/privacy/masks.py).
    """

    def __init__(
        self, edge: str, name: str, cfg: CameraConfig, slots: FrameSlots, stop: threading.Event,
        refusal: CameraFault | None = None,
    ) -> None:
        super().__init__(name=f"camera-{name}", daemon=True)
        self.edge, self.camera, self.cfg, self.slots, self.stop = edge, name, cfg, slots, stop
        self.refusal = refusal
        self.masks = FrameMasks(cfg.privacy) if cfg.privacy is not None and cfg.privacy.masks else None
        self.live = is_live(resolve_or_same(cfg.url))
        self.hls = HlsCamera(cfg.url, redact_url(cfg.url), cfg.edge) if is_hls(cfg.url) else None
        self.policy: FramePolicy = "newest" if self.live or cfg.realtime else "every_frame"
        self.telemetry = CameraTelemetry(edge, name)
        self.machine = CameraStateMachine(self.telemetry)
        self.error: str | None = None
        self.fault: str | None = None
        self.detail: str | None = None
        self.losses: dict[str, int] = {}
        self.frames = self.reconnects = self.rate_skipped = self.corrupt_frames = self.loops = 0
        self.removal: str | None = None
        self._blocked_done_s = 0.0
        self.session: CaptureSession | None = None
        self._backoff = Backoff(cfg.backoff_initial_s, cfg.backoff_max_s)
        self.timeline = Timeline(self.live)
        self.decoder = "software"
        self.decoder_fallbacks: dict[str, int] = {}
        self._first_frame_s: float | None = None  # perf_counter of the first frame decoded
        self._last_frame_s = 0.0  # and of the last
        self._discontinuities_published = 0
        slots.add_camera(name, self.policy, depth=FILE_SLOT_DEPTH)

    @property
    def state(self) -> str:
        """The current state (see :mod:`vcascade.edge.capture.state`)."""
        return self.machine.state

    @property
    def blocked_s(self) -> float:
        """Seconds spent waiting for the detector to take frames (backpressure), including a wait in progress."""
        session = self.session
        waiting_s = time.perf_counter() - session.phase_since_s if session is not None and self.blocked else 0.0
        return self._blocked_done_s + max(0.0, waiting_s)

    @property
    def decode_fps(self) -> float | None:
        """The measured decode rate, frames/s: frames decoded after the first one over the seconds from the first
        to the last (reconnect outages and backpressure included: the rate the camera really delivered). None
        before two frames."""
        first_s, last_s = self._first_frame_s, self._last_frame_s
        if first_s is None or self.frames < 2 or last_s <= first_s:
            return None
        return (self.frames - 1) / (last_s - first_s)

    @property
    def blocked(self) -> bool:
        """True while the reader waits for the detector to take a frame (backpressure, not a stall)."""
        session = self.session
        return session is not None and session.phase == "delivering"

    def run(self) -> None:
        try:
            if self.refusal is not None:
                self._settle(("failed", self.refusal.reason, self.refusal.detail))
                self.machine.to("failed", self.refusal.reason, self.refusal.detail)
                return
            while not self.stop.is_set():
                state, reason, detail = self._run_session()
                self.publish_totals()
                self.machine.to(state, reason, detail)
                if state in ("ended", "failed"):
                    return
                self._back_off(state, detail)
            self.machine.to("ended", "stopped")
        except Exception as exc:  # a bug here must fail this camera only, never the edge
            self._fail("error", f"{redact_url(self.cfg.url)}: reader error: {type(exc).__name__}: {exc}")
        finally:
            self.publish_totals()
            self.slots.close(self.camera)

    def _run_session(self) -> Outcome:
        session = self.session = CaptureSession(self)
        session.start()
        while True:
            session.changed.wait(self._next_look_s(session))
            session.changed.clear()  # before the looks below: a change after them wakes the next wait at once
            self.publish_totals()
            alive = session.is_alive()  # read before the outcome: a session sets its outcome, then ends
            if session.opened and self.state != "streaming":
                self.machine.to("streaming", "opened")
                self.fault = self.detail = None
            if session.outcome is not None:
                return self._settle(session.outcome)
            if self.stop.is_set() or not alive:
                session.stop()
                session.join(STOP_JOIN_S)
                return "ended", "stopped", ""
            verdict = self._watch(session)
            if verdict is not None:
                session.stop()  # abandon: the thread releases its capture when its call returns
                return verdict

    def _next_look_s(self, session: CaptureSession) -> float:
        """Seconds until the supervisor must look at ``session`` again: :data:`LOOK_INTERVAL_S`, or less when the
        watchdog's deadline for the open or read in progress (:meth:`_watch`) comes sooner."""
        phase, since_s = session.phase, session.phase_since_s
        if phase == "opening":
            limit_s = self.cfg.open_timeout_s
        elif phase == "reading":
            limit_s = session.read_timeout_s
        else:
            return LOOK_INTERVAL_S
        due_s = since_s + limit_s + (WATCHDOG_GRACE_S if self.live else 0.0) - time.perf_counter()
        return min(LOOK_INTERVAL_S, max(0.0, due_s) + 0.001)  # just past it: _watch's test is strict

    def _watch(self, session: CaptureSession) -> Outcome | None:
        """The watchdog: a session hung in open or read too long is stalled; a blocked or pacing one is not.

        Live sources then reconnect; a file fails (reopening it would repeat its frames). A live source gets
        :data:`WATCHDOG_GRACE_S` more, so that FFmpeg's own timeout ends the read cleanly first.
        """
        waited_s = time.perf_counter() - session.phase_since_s - (WATCHDOG_GRACE_S if self.live else 0.0)
        if session.phase == "opening" and waited_s > self.cfg.open_timeout_s:
            state, reason, detail = "backing_off", "open_timeout", f"not opened after {waited_s:.1f} s"
        elif session.phase == "reading" and waited_s > session.read_timeout_s:
            state, reason, detail = "stalled", "read_timeout", f"no frame for {waited_s:.1f} s"
        else:
            return None
        return self._settle((state if self.live else "failed", reason, detail))

    def _settle(self, outcome: Outcome) -> Outcome:
        state, reason, detail = outcome
        if reason in FAULT_REASONS:
            shown = redact_url(self.cfg.url)
            self.fault = reason
            self.detail = redact_url(detail if shown in detail else f"{shown}: {detail}")
            if state == "failed":
                self.error = self.detail
        return outcome

    @property
    def reason(self) -> str:
        """Why the camera is in its state: a fault of :data:`FAULT_REASONS` or a lifecycle word (``opened``...)."""
        return self.machine.reason

    def _back_off(self, state: str, detail: str) -> None:
        if state == "stalled":
            self.machine.to("backing_off", "reconnect", detail)
        delay_s = self._backoff.next_delay_s()
        if self.stop.wait(delay_s):
            return
        self.reconnects += 1
        self.telemetry.reconnecting()
        self.machine.to("connecting", "retry", f"attempt {self._backoff.attempt} after {delay_s:.2f} s")

    def _fail(self, reason: str, error: str) -> None:
        self.error = error
        self.machine.to("failed", reason, error)

    def accept(self, session: CaptureSession, frame: Frame) -> Frame | None:
        """Count one decoded frame of ``session`` and pass it through the rate gate and the pacer. Returns the
        frame to hand over (restamped when paced), or None: rate-skipped, or the session was cancelled.

        Called for every frame on the decoding thread: it only adds to plain totals (``frames``,
        ``rate_skipped``, blocked time), which the supervisor publishes as metrics (:meth:`publish_totals`).
        """
        if session.cancel.is_set():
            return None
        self.frames += 1
        if self._backoff.attempt:
            self._backoff.reset()
        if session.gate is not None and not session.gate.accept(frame.stream_ts_ms):
            self.rate_skipped += 1
            self._frame_decoded(frame.capture_s)
            return None
        if session.pacer is not None:
            session.set_phase("pacing")
            if not session.pacer.wait(frame.stream_ts_ms, session.cancel):
                return None
            frame = replace(frame, capture_s=time.perf_counter(), capture_unix_ms=time.time() * 1000.0)
        self._frame_decoded(frame.capture_s)
        return frame

    def deliver(self, session: CaptureSession, frame: Frame) -> bool:
        """Put one frame of ``session`` into the camera's slot from the session's thread (waits while an
        ``every_frame`` slot is full). False if the session must stop."""
        return not session.cancel.is_set() and self.slots.put(frame, session.cancel)

    def lend(self, session: CaptureSession, frames: PulledFrames[Outcome | None]) -> Outcome | None:
        """Let the detector's threads decode ``session``'s frames as they take them (:mod:`vcascade.edge.capture.pull`;
        the first frame is decoded here) and wait until they end or the session is cancelled. Returns the frames' outcome (None: end of stream).

        Raises:
            What decoding raised (a :class:`CameraFault`...), here on the session's thread.
        """
        frames.prime()
        if not frames.done.is_set():
            self.slots.attach(self.camera, frames)
        try:
            ended = frames.wait(session.cancel)
        finally:
            self.slots.detach(self.camera)  # no pull runs after this: the session may close its source
            frames.close()
        if not ended:
            return "ended", "stopped", ""
        if frames.error is not None:
            raise frames.error
        return frames.result

    def add_blocked(self, seconds: float) -> None:
        """Add ``seconds`` waited for the detector to want a frame (backpressure) to :attr:`blocked_s`."""
        self._blocked_done_s += seconds

    def use_decoder(self, decoder: str) -> None:
        """The source opened decoding with ``decoder`` (``software``, ``cuda``, ``qsv``); shown as a metric."""
        self.decoder = decoder
        self.telemetry.decoder_in_use(decoder)

    def count_fallback(self, device: str, reason: str, message: str) -> None:
        """Hardware decoder ``device`` was not used for ``reason`` (:data:`vcascade.edge.capture.hwdecode.FALLBACK_REASONS`)."""
        key = f"{device}:{reason}"
        if key not in self.decoder_fallbacks:
            log.warning("camera %s: %s decoder not used (%s): %s; decoding in software", self.camera, device, reason,
                        redact_url(message))
        self.decoder_fallbacks[key] = self.decoder_fallbacks.get(key, 0) + 1
        self.telemetry.decoder_fallback(device, reason)

    def _frame_decoded(self, at_s: float) -> None:
        """Extend the span of :attr:`decode_fps` to a frame decoded (or released by the pacer) at ``at_s``."""
        if self._first_frame_s is None:
            self._first_frame_s = at_s
        self._last_frame_s = at_s

    def publish_totals(self) -> None:
        """Publish the running totals of frames decoded, rate-skipped, skipped and blocked time as metrics."""
        skipped = self.slots.skipped.get(self.camera, 0)
        self.telemetry.publish_reader_totals(self.frames, self.rate_skipped, self._blocked_done_s, skipped)
        discontinuities = self.timeline.discontinuities
        if discontinuities > self._discontinuities_published:
            self.telemetry.timestamp_discontinuities(discontinuities - self._discontinuities_published)
            self._discontinuities_published = discontinuities

    def count_corrupt(self, reason: str, n: int) -> None:
        """Count ``n`` frames lost or damaged for ``reason`` (:data:`vcascade.edge.capture.faults.FRAME_LOSS_REASONS`)."""
        self.corrupt_frames += n
        self.losses[reason] = self.losses.get(reason, 0) + n
        self.telemetry.frames_corrupt(reason, n)


def resolve_or_same(url: str) -> str:
    """``resolve(url)`` for package:// URIs; a missing package leaves the URL as is (the reader reports it)."""
    try:
        return resolve(url)
    except FileNotFoundError:
        return url

"""Camera readers: one thread per camera decoding with OpenCV's FFmpeg backend into the frame slots.

Video files are read frame by frame (``every_frame`` policy: the detector sees every frame); ``rtsp://`` and
``http(s)://`` sources are live (``newest`` policy: frames the detector never saw are counted as skipped).
A camera that cannot be opened or fails while reading is reported for that camera only; the other cameras
of the edge keep running.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import cv2

from edge import metrics
from edge.frames import Frame, FramePolicy, FrameSlots
from vcascade.config import CameraConfig
from vcascade.redact import redact_url
from vcascade.resources import resolve

log = logging.getLogger(__name__)

OPEN_TIMEOUT_MS = 10_000
"""FFmpeg open timeout for live sources, ms (OpenCV ``CAP_PROP_OPEN_TIMEOUT_MSEC``)."""
READ_TIMEOUT_MS = 10_000
"""FFmpeg read timeout for live sources, ms (OpenCV ``CAP_PROP_READ_TIMEOUT_MSEC``)."""

_LIVE_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://")
_ffmpeg_env_lock = threading.Lock()


class SourceError(RuntimeError):
    """A camera cannot be opened or read. The message is safe to log (credentials redacted).

    Recovery: the camera is marked failed; the other cameras continue.
    """


def is_live(url: str) -> bool:
    """True for network streams (newest-frame policy), False for files."""
    return url.lower().startswith(_LIVE_SCHEMES)


def open_capture(cfg: CameraConfig) -> cv2.VideoCapture:
    """Open a camera with the FFmpeg backend.

    Raises:
        SourceError: missing, empty or undecodable file; unreachable stream (after the open timeout).
    """
    shown = redact_url(cfg.url)
    try:
        url = resolve(cfg.url)
    except FileNotFoundError as exc:
        raise SourceError(str(exc)) from None
    if not is_live(url):
        path = Path(url)
        if not path.is_file():
            raise SourceError(f"{shown}: no such file")
        if path.stat().st_size == 0:
            raise SourceError(f"{shown}: file is empty (0 bytes)")
        cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    else:
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS, cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT_MS]
        with _ffmpeg_env_lock:  # OpenCV reads FFmpeg options from the environment at open time
            os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = f"rtsp_transport;{cfg.rtsp_transport}"
            cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG, params)
    if not cap.isOpened():
        cap.release()
        raise SourceError(f"{shown}: cannot open (FFmpeg could not read a video stream from it)")
    return cap


class CameraReader(threading.Thread):
    """Decodes one camera into the shared :class:`FrameSlots` until end of stream, ``max_frames`` or stop.

    Attributes:
        state: ``connecting``, ``streaming``, ``ended`` or ``failed``.
        error: why it failed (credentials redacted), else None.
        frames: frames decoded so far.
    """

    def __init__(self, edge: str, name: str, cfg: CameraConfig, slots: FrameSlots, stop: threading.Event) -> None:
        super().__init__(name=f"camera-{name}", daemon=True)
        self.edge, self.camera, self.cfg, self.slots, self.stop = edge, name, cfg, slots, stop
        self.policy: FramePolicy = "newest" if is_live(resolve_or_same(cfg.url)) else "every_frame"
        self.state = "connecting"
        self.error: str | None = None
        self.frames = 0
        slots.add_camera(name, self.policy)

    def run(self) -> None:
        up = metrics.CAMERA_UP.labels(self.edge, self.camera)
        try:
            cap = open_capture(self.cfg)
        except SourceError as exc:
            self._fail(str(exc))
            return
        self._transition("streaming", "opened")
        up.set(1)
        try:
            self._read_loop(cap)
        except Exception as exc:  # a broken decoder must not take the edge down
            self._fail(f"{redact_url(self.cfg.url)}: read failed: {exc}")
        finally:
            cap.release()
            up.set(0)
            self.slots.close(self.camera)

    def _read_loop(self, cap: cv2.VideoCapture) -> None:
        decoded = metrics.FRAMES_DECODED.labels(self.edge, self.camera)
        skipped = metrics.FRAMES_SKIPPED.labels(self.edge, self.camera)
        while not self.stop.is_set():
            if self.cfg.max_frames is not None and self.frames >= self.cfg.max_frames:
                self._transition("ended", f"max_frames={self.cfg.max_frames} reached")
                return
            ok, image = cap.read()
            if not ok:
                self._transition("ended", f"end of stream after {self.frames} frames")
                return
            now_s, now_unix_ms = time.perf_counter(), time.time() * 1000.0
            frame = Frame(self.camera, self.frames, image, cap.get(cv2.CAP_PROP_POS_MSEC), now_s, now_unix_ms)
            self.frames += 1
            decoded.inc()
            before = self.slots.skipped[self.camera]
            if not self.slots.put(frame, self.stop):
                return
            skipped.inc(self.slots.skipped[self.camera] - before)
        self._transition("ended", "stopped")

    def _transition(self, state: str, reason: str) -> None:
        self.state = state
        log.info("camera %s: %s (%s)", self.camera, state, reason)

    def _fail(self, error: str) -> None:
        self.error = error
        self.state = "failed"
        log.error("camera %s: failed: %s", self.camera, error)
        self.slots.close(self.camera)


def resolve_or_same(url: str) -> str:
    """``resolve(url)`` for package:// URIs; a missing package leaves the URL as is (the reader reports it)."""
    try:
        return resolve(url)
    except FileNotFoundError:
        return url

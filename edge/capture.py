"""Opening a camera with OpenCV's FFmpeg backend, and turning whatever it decodes into (H, W, 3) uint8 BGR.

Source kinds (``CameraConfig.url``):

* a video file path (or ``package://`` sample data): every frame, or paced by PTS with ``realtime: true``;
* ``rtsp://`` / ``rtsps://`` (transport ``tcp`` or ``udp`` from ``rtsp_transport``), ``http(s)://`` streams FFmpeg
  can open (MJPEG, HLS ``.m3u8``): live, newest-frame slot, reconnect on failure;
* ``device://N``: local capture device number N (``/dev/videoN`` on Linux, via OpenCV's default backend): live.

Rotation policy: OpenCV's auto-orientation is switched on (``CAP_PROP_ORIENTATION_AUTO``), so a file carrying
rotate / display-matrix metadata is decoded upright: frames, detection boxes and crops are all in upright
display coordinates, the way a video player shows the file.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url
from vcascade.core.resources import resolve

_LIVE_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "device://")
_DEVICE = re.compile(r"^device://(\d{1,3})$", re.IGNORECASE)
_ffmpeg_env_lock = threading.Lock()
_UINT8 = np.dtype(np.uint8)


class SourceError(RuntimeError):
    """A camera cannot be opened or read. The message is safe to log (credentials redacted).

    Recovery: a file camera is marked failed; a live camera backs off and reconnects; other cameras continue.
    """


def is_live(url: str) -> bool:
    """True for network streams and local devices (newest-frame policy, reconnect), False for files."""
    return url.lower().startswith(_LIVE_SCHEMES)


def device_index(url: str) -> int | None:
    """The N of ``device://N``, else None."""
    match = _DEVICE.match(url)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class StreamInfo:
    """What the container header says about an opened source (files; live streams mostly report nothing).

    Attributes:
        frame_count: frames announced by the header (0 when unknown).
        fps: nominal frame rate, frames/s (0 when unknown); used only to judge an early end, never for PTS.
    """

    frame_count: int
    fps: float

    @property
    def duration_ms(self) -> float:
        """Announced duration, ms (0 when unknown)."""
        return self.frame_count / self.fps * 1000.0 if self.frame_count > 0 and self.fps > 0 else 0.0


def open_capture(cfg: CameraConfig) -> cv2.VideoCapture:
    """Open a camera with the FFmpeg backend (devices: OpenCV's default backend), auto-orientation on.

    Live sources get FFmpeg open/read timeouts of ``cfg.open_timeout_s`` / ``cfg.read_timeout_s``.

    Raises:
        SourceError: missing, empty or undecodable file; unreachable stream or device (after the open timeout).
    """
    shown = redact_url(cfg.url)
    try:
        url = resolve(cfg.url)
    except FileNotFoundError as exc:
        raise SourceError(str(exc)) from None
    if not is_live(url):
        cap = _open_file(url, shown)
    elif (index := device_index(url)) is not None:
        cap = cv2.VideoCapture(index)
    elif url.lower().startswith("device://"):
        raise SourceError(f"{shown}: a device URL is device://N with N the device number (e.g. device://0)")
    else:
        cap = _open_stream(url, cfg)
    if not cap.isOpened():
        cap.release()
        raise SourceError(f"{shown}: cannot open (FFmpeg could not read a video stream from it)")
    cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)
    return cap


def _open_file(url: str, shown: str) -> cv2.VideoCapture:
    path = Path(url)
    if not path.is_file():
        raise SourceError(f"{shown}: no such file")
    if path.stat().st_size == 0:
        raise SourceError(f"{shown}: file is empty (0 bytes)")
    return cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)


def _open_stream(url: str, cfg: CameraConfig) -> cv2.VideoCapture:
    params = [
        cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(cfg.open_timeout_s * 1000),
        cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(cfg.read_timeout_s * 1000),
    ]
    options = f"rtsp_transport;{cfg.rtsp_transport}" if url.lower().startswith(("rtsp://", "rtsps://")) else ""
    with _ffmpeg_env_lock:  # OpenCV reads FFmpeg options from the environment at open time
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = options
        return cv2.VideoCapture(url, cv2.CAP_FFMPEG, params)


def stream_info(cap: cv2.VideoCapture) -> StreamInfo:
    """Frame count and nominal fps from the header of an opened capture (0 where unknown)."""
    count, fps = cap.get(cv2.CAP_PROP_FRAME_COUNT), cap.get(cv2.CAP_PROP_FPS)
    return StreamInfo(int(count) if count > 0 else 0, float(fps) if 0 < fps < 1000 else 0.0)


def stopped_early(info: StreamInfo, frames: int, last_pts_ms: float | None, step_ms: float | None) -> bool:
    """True when a file ended clearly before the end its header announces (truncated or undecodable data).

    Both must hold: fewer frames than announced (2 % slack, header counts are estimates for some containers),
    and the last PTS more than two frame intervals before the announced duration. Frames lost in the middle of
    a file whose timeline still reaches the end are counted as PTS gaps instead.
    """
    if info.frame_count <= 0 or info.duration_ms <= 0:
        return False
    interval_ms = step_ms or 1000.0 / info.fps
    reached_ms = (last_pts_ms or 0.0) + interval_ms
    return frames < 0.98 * info.frame_count and reached_ms < info.duration_ms - 2 * interval_ms


def normalize_image(image: np.ndarray | None) -> np.ndarray | None:
    """Convert a decoded image to (H, W, 3) uint8 BGR; None when it cannot be (counted as a corrupt frame).

    Accepts (H, W) or (H, W, 1) gray, (H, W, 3) BGR, (H, W, 4) BGRA, uint8 or uint16 (scaled by 1/257 to
    0..255). Odd widths and heights are kept as they are. Returns the input itself when it is already right.
    """
    if image is not None and image.ndim == 3 and image.shape[2] == 3 and image.dtype == _UINT8 and image.size:
        return image  # the usual case, decided in a few attribute reads
    if image is None or image.ndim not in (2, 3) or image.size == 0:
        return None
    if image.dtype == np.uint16:
        image = (image // 257).astype(np.uint8)
    elif image.dtype != np.uint8:
        return None
    channels = 1 if image.ndim == 2 else image.shape[2]
    if channels == 3:
        return image
    if channels == 1:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if channels == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    return None

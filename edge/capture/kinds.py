"""Camera source kinds, and turning a decoded image into (H, W, 3) uint8 BGR.

Source kinds (``CameraConfig.url``):

* a video file path (or ``package://`` sample data): every frame, or paced by PTS with ``realtime: true``;
* ``rtsp://`` / ``rtsps://`` (transport ``tcp`` or ``udp`` from ``rtsp_transport``), ``http(s)://`` streams FFmpeg
  can open (MJPEG, HLS ``.m3u8``): live, newest-frame slot, reconnect on failure;
* ``device://N``: local capture device number N (``/dev/videoN``, FFmpeg's ``v4l2`` input): live.

Opening and decoding is :mod:`vcascade.edge.capture.av_reader` (PyAV). Rotation policy: rotate / display-matrix metadata is
applied, so frames, detection boxes and crops are all in upright display coordinates, the way a video player shows
the file.
"""

from __future__ import annotations

import re

import cv2
import numpy as np

_LIVE_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "device://")
_DEVICE = re.compile(r"^device://(\d{1,3})$", re.IGNORECASE)
_UINT8 = np.dtype(np.uint8)


class SourceError(RuntimeError):
    """A camera cannot be opened or read. The message is safe to log (credentials redacted). Raised as its
    subclass :class:`vcascade.edge.capture.faults.CameraFault`, which names the cause.

    Recovery: a file camera is marked failed; a live camera backs off and reconnects; other cameras continue.
    """


def is_live(url: str) -> bool:
    """True for network streams and local devices (newest-frame policy, reconnect), False for files."""
    return url.lower().startswith(_LIVE_SCHEMES)


def device_index(url: str) -> int | None:
    """The N of ``device://N``, else None."""
    match = _DEVICE.match(url)
    return int(match.group(1)) if match else None


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

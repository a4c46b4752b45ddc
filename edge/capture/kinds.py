"""Camera source kinds, and turning a decoded image into (H, W, 3) uint8 BGR.

Source kinds (``CameraConfig.url``):

* a video file path (or ``package://`` sample data): every frame, or paced by PTS with ``realtime: true``; a file
  still being written is followed to its end (:mod:`vcascade.edge.capture.follow`);
* ``rtsp://`` / ``rtsps://`` (transport ``tcp`` or ``udp`` from ``rtsp_transport``), ``http(s)://`` streams FFmpeg
  can open (MJPEG, HLS ``.m3u8``): live, newest-frame slot, reconnect on failure; an HLS playlist is paced and
  ends at its end (:mod:`vcascade.edge.capture.hls`);
* ``device://N``: local capture device number N (``/dev/videoN``, FFmpeg's ``v4l2`` input): live;
* an image sequence, FFmpeg's ``image2`` patterns: ``frames/%05d.jpg`` (numbered files, the first numbered 0 to
  4, as FFmpeg looks for it) or a glob ``frames/*.jpg`` (files in name order); 25 frames/s of stream time
  (FFmpeg's default), every frame, like a file;
* a single image (``.jpg``, ``.png``...): one frame, then the end, like a one-frame file.

Opening and decoding is :mod:`vcascade.edge.capture.av_reader` (PyAV). Rotation policy: rotate / display-matrix metadata is
applied, so frames, detection boxes and crops are all in upright display coordinates, the way a video player shows
the file.
"""

from __future__ import annotations

import glob
import os
import re

import cv2
import numpy as np

_LIVE_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "device://")
_DEVICE = re.compile(r"^device://(\d{1,3})$", re.IGNORECASE)
_SEQUENCE = re.compile(r"%0?\d*d")
SEQUENCE_START_RANGE = 5
"""FFmpeg's image2 demuxer looks for a sequence's first file among the numbers 0 to 4 (``start_number_range``)."""
_UINT8 = np.dtype(np.uint8)


class SourceError(RuntimeError):
    """A camera cannot be opened or read. The message is safe to log (credentials redacted). Raised as its
    subclass :class:`vcascade.edge.capture.faults.CameraFault`, which names the cause.

    Recovery: a file camera is marked failed; a live camera backs off and reconnects; other cameras continue.
    """


def is_live(url: str) -> bool:
    """True for network streams and local devices (newest-frame policy, reconnect), False for files."""
    return url.lower().startswith(_LIVE_SCHEMES)


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif", ".ppm", ".pgm")
"""File name endings of still images (decoded in software: hardware video decoders take no still image)."""


def is_image(url: str) -> bool:
    """True for a still image or an image sequence pattern, by its file name ending."""
    return not is_live(url) and url.lower().endswith(IMAGE_SUFFIXES)


def image_pattern(url: str) -> str | None:
    """``"sequence"`` for an FFmpeg numbered-file pattern (``img%03d.jpg``, ``img%d.png``), ``"glob"`` for a glob
    (``*``, ``?`` or ``[`` in the file name), else None. Live URLs and existing files are never patterns."""
    if is_live(url) or os.path.exists(url):
        return None
    name = url.rsplit("/", 1)[-1]
    if _SEQUENCE.search(name):
        return "sequence"
    return "glob" if any(c in name for c in "*?[") else None


def sequence_files(url: str, kind: str) -> list[str]:
    """The files an image pattern names, as FFmpeg's ``image2`` demuxer would read them: for ``sequence``, the
    numbers from the first existing one among 0-4 (FFmpeg's ``start_number`` search range) while the next
    exists; for ``glob``, every match in name order."""
    if kind == "glob":
        return sorted(glob.glob(url))
    spec = _SEQUENCE.search(url.rsplit("/", 1)[-1])
    files: list[str] = []
    start = next((n for n in range(SEQUENCE_START_RANGE) if os.path.isfile(_numbered(url, spec, n))), None)
    while start is not None and os.path.isfile(path := _numbered(url, spec, start + len(files))):
        files.append(path)
    return files


def _numbered(url: str, spec: re.Match[str], n: int) -> str:
    head, name = url.rsplit("/", 1) if "/" in url else ("", url)
    name = name[: spec.start()] + spec.group(0) % n + name[spec.end():]
    return f"{head}/{name}" if head else name


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

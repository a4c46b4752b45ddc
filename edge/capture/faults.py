"""Why a camera cannot be opened or read: one fixed word per cause (the taxonomy), and the classifier that finds it.

A reason is a short fixed word: a metric label (``vcascade_edge_camera_state``), a key in the edge's camera
snapshot (``status``, ``camera list``, ``--summary-json``) and the word in the camera's WARNING log line.
docs/CAMERAS.md explains each one and how to fix it.

The classifier reads what FFmpeg (through PyAV) really said: the ``errno`` of its error (``ECONNREFUSED``,
``ENOENT``, ``EACCES``...), its HTTP/RTSP status errors (``AVERROR_HTTP_UNAUTHORIZED``, ``AVERROR_HTTP_NOT_FOUND``)
and, where the errno is a generic ``EIO``, the last error line FFmpeg logged (``Failed to resolve hostname``).
Files are checked with ``os.stat`` before FFmpeg sees them: a FIFO would block FFmpeg's open forever.
"""

from __future__ import annotations

import errno
import os
import re
import stat

import av

from vcascade.core.redact import redact_url
from vcascade.edge.capture.kinds import SourceError

FAULT_REASONS: tuple[str, ...] = (
    "connection_refused",  # nothing listens on the host's port
    "open_timeout",  # no answer within open_timeout_s
    "read_timeout",  # opened, then no data within read_timeout_s
    "name_not_resolved",  # DNS has no address for the host name
    "unauthorized",  # 401/403: wrong or missing user name / password
    "not_found",  # 404: the server has no stream at this path
    "network_error",  # another network failure (reset, unreachable network)
    "no_video_stream",  # the source has no video stream (audio only, data)
    "unsupported_codec",  # the video codec has no decoder in this FFmpeg
    "invalid_data",  # FFmpeg recognises no format in the data (not a video, or garbage)
    "truncated_file",  # the file ends before its container says it does
    "permission_denied",  # the file or device exists but cannot be read by this user
    "not_a_file",  # the path is a directory, FIFO, socket...: not a regular file
    "missing_file",  # no such file or device
    "empty_file",  # 0 bytes
    "bad_url",  # the URL itself is malformed (e.g. device://abc)
    "stream_ended",  # a live stream ended (the server closed it); the camera reconnects
    "playlist_stale",  # a live HLS playlist stopped growing (no new segment for 3 target durations)
    "read_error",  # any other error while reading (the detail says which)
    "protocol_not_allowed",  # a URL scheme that is no camera kind (vcascade.edge.capture.url_policy)
    "host_not_allowed",  # a network camera on a host edges.<name>.camera_hosts does not hold
    "redirect_refused",  # an HTTP camera redirected to another host (or protocol) not allowed
    "not_video",  # a file FFmpeg reads with a demuxer that is not a video one (text, image, audio)
    "privacy_mask_outside_frame",  # a privacy mask has a corner outside the camera's frames (no frame is used)
    "privacy_model_missing",  # face or text redaction is on and its model cannot be loaded (no frame is read)
)
"""Every cause of a camera fault, as the fixed word used in metrics, logs and snapshots."""

FRAME_LOSS_REASONS: tuple[str, ...] = (
    "corrupt",  # the decoder flagged the frame corrupt (delivered with concealment), or could not decode a packet
    "missing_reference",  # a frame decoded although a frame it references was missing (FFmpeg said so)
    "before_keyframe",  # an access unit before the first keyframe: cannot be decoded (stream joined mid-GOP)
    "pts_gap",  # frames missing from the stream itself: a timestamp step longer than the declared frame duration
    "pts_not_increasing",  # a frame whose PTS is not after the previous frame's
    "bad_image",  # a decoded image that cannot become (H, W, 3) uint8 BGR
)
"""Every reason a frame is counted lost or damaged (label of ``vcascade_edge_frames_corrupt_total``)."""

_ERRNO_REASONS = {
    errno.ECONNREFUSED: "connection_refused",
    errno.ETIMEDOUT: "open_timeout",
    errno.ENOENT: "missing_file",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EISDIR: "not_a_file",
    errno.ECONNRESET: "network_error",
    errno.ENETUNREACH: "network_error",
    errno.EHOSTUNREACH: "network_error",
}
_HTTP_REASONS = (
    (av.error.HTTPUnauthorizedError, "unauthorized"),
    (av.error.HTTPForbiddenError, "unauthorized"),
    (av.error.HTTPNotFoundError, "not_found"),
    (av.error.DecoderNotFoundError, "unsupported_codec"),
    (av.error.ExitError, "open_timeout"),  # PyAV's interrupt callback: the timeout passed
)
_LOG_REASONS = (
    ("failed to resolve hostname", "name_not_resolved"),
    ("partial file", "truncated_file"),
    ("401 unauthorized", "unauthorized"),
    ("404 not found", "not_found"),
)


class CameraFault(SourceError):
    """A camera cannot be opened or read, with its cause.

    Attributes:
        reason: one of :data:`FAULT_REASONS`.
        detail: what happened, for people; credentials in URLs redacted.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in FAULT_REASONS:
            raise ValueError(f"unknown camera fault reason {reason!r}; expected one of {FAULT_REASONS}")
        super().__init__(redact_url(detail))
        self.reason, self.detail = reason, redact_url(detail)


def check_file(path: str, shown: str) -> None:
    """Check that ``path`` is a readable, non-empty regular file before FFmpeg opens it.

    Raises:
        CameraFault: ``missing_file``, ``not_a_file`` (directory, FIFO, socket, device), ``empty_file`` or
            ``permission_denied``.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CameraFault("missing_file", f"{shown}: no such file") from None
    except PermissionError as exc:
        raise CameraFault("permission_denied", f"{shown}: permission denied ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a file"
        raise CameraFault("not_a_file", f"{shown}: is {kind}, not a regular file" if kind != "not a file"
                          else f"{shown}: not a regular file")
    if st.st_size == 0:
        raise CameraFault("empty_file", f"{shown}: file is empty (0 bytes)")
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        raise CameraFault("permission_denied", f"{shown}: permission denied (cannot read the file)") from None


def classify(exc: BaseException, shown: str, *, opening: bool) -> CameraFault:
    """The :class:`CameraFault` for an error PyAV raised while opening (``opening``) or reading a source.

    Args:
        exc: the exception (``av.FFmpegError`` and its subclasses carry ``errno`` and FFmpeg's last error line).
        shown: the source as it may be shown (credentials redacted).
        opening: True while opening; a timeout is then ``open_timeout``, else ``read_timeout``.
    """
    if isinstance(exc, CameraFault):
        return exc
    message = str(exc)
    reason = next((word for kind, word in _HTTP_REASONS if isinstance(exc, kind)), None)
    if reason is None:
        lowered = message.lower()
        reason = next((word for text, word in _LOG_REASONS if text in lowered), None)
    if reason is None and isinstance(exc, OSError) and exc.errno in _ERRNO_REASONS:
        reason = _ERRNO_REASONS[exc.errno]
    if reason is None and isinstance(exc, av.error.InvalidDataError):
        reason = "invalid_data"
    if reason is None:
        reason = "network_error" if opening and "://" in shown else "read_error"
    if reason == "open_timeout" and not opening:
        reason = "read_timeout"
    return CameraFault(reason, f"{shown}: {_plain(message)}")


_PYAV_MESSAGE = re.compile(r"^\[Errno -?\d+\] (?P<text>.*?)(?:: '[^']*')?(?:; last error log: (?P<log>.*))?$", re.DOTALL)


def _plain(message: str) -> str:
    """PyAV's ``[Errno N] Text: 'url'; last error log: [component] line`` as ``Text (component: line)`` (no square
    brackets: terminal tables read them as markup)."""
    match = _PYAV_MESSAGE.match(message.strip())
    if match is None:
        return message
    text, line = match.group("text"), (match.group("log") or "").strip()
    if line.startswith("[") and "] " in line:
        component, rest = line[1:].split("] ", 1)
        line = f"{component}: {rest}"
    return f"{text} ({line})" if line else text


def is_unfinished_mp4(path: str, message: str) -> bool:
    """True for an MP4/MOV file (``ftyp`` box first) that FFmpeg opened without finding its index (``moov``):
    a recording cut before it was finalised. Garbage named ``.mp4`` has no ``ftyp`` box and is not one."""
    if "moov atom not found" not in message:
        return False
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8] == b"ftyp"
    except OSError:
        return False

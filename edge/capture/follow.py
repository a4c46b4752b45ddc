"""Growing files: a recording still being written is followed to its end, not read to wherever its writer is.

A recorder writes its MPEG-TS, fragmented MP4 or Matroska file while the edge reads it. Read as a plain file, it
would end wherever the writer happened to be (a clean ``end_of_file`` or a ``truncated_file``, depending on
timing). A followed file is opened with FFmpeg's ``file`` protocol options ``follow=1`` (at the end of the data
it waits for more instead of reporting the end), ``rw_timeout`` (it gives up, with ``EIO``, after
``follow_idle_s`` without a new byte) and ``seekable=0`` (read front to back: a fragmented MP4 is then read
fragment by fragment, not up to the file size seen at opening). The camera then ends ``writer_idle`` when the file
grew while it was read, and ``end_of_file`` when it did not (a file copied a moment ago: nobody was writing it, and
it ended ``follow_idle_s`` after its last frame). FFmpeg's MP4 demuxer tries again after a read that timed out:
a fragmented MP4 ends up to three times ``follow_idle_s`` after its last write.

``follow`` (per camera): ``auto`` (the default) follows a file whose last change is less than ``follow_idle_s``
old when it opens (its writer is at work); ``always`` follows every file (a finished one then ends
``follow_idle_s`` after its last frame); ``never`` reads files as they are. Only formats that can be read front to
back are followed (:func:`streamable`: MPEG-TS, fragmented MP4, Matroska/WebM); an MP4 whose index is written at
the end cannot be read before it is finished, and stays ``truncated_file`` until then.
"""

from __future__ import annotations

import os
import time

import av

TS_PACKET = 188
"""MPEG-TS packet size, bytes (ISO/IEC 13818-1): a transport stream has the sync byte 0x47 every 188 bytes."""
SNIFF_BYTES = 64 * 1024
"""Bytes of a file's start read to tell a streamable format."""
IDLE_SLACK = 0.9
"""The file counts as idle when its last change is at least this fraction of ``follow_idle_s`` old (FFmpeg's
``rw_timeout`` and the file's modification time are on different clocks)."""


def streamable(path: str) -> bool:
    """True when the file's start shows a format that can be read while it grows: MPEG-TS (sync byte at 0 and 188),
    fragmented MP4 (an ``mvex`` box in the ``moov`` at its start), Matroska/WebM (EBML header)."""
    try:
        with open(path, "rb") as file:
            head = file.read(SNIFF_BYTES)
    except OSError:
        return False
    if len(head) > TS_PACKET and head[0] == 0x47 and head[TS_PACKET] == 0x47:
        return True
    if head[4:8] == b"ftyp" and b"moov" in head and b"mvex" in head:
        return True
    return head[:4] == b"\x1a\x45\xdf\xa3"


def should_follow(path: str, follow: str, idle_s: float) -> bool:
    """Whether to follow the file at ``path`` under the ``follow`` setting (``auto``, ``always``, ``never``):
    streamable, and for ``auto`` changed less than ``idle_s`` ago."""
    if follow == "never" or not streamable(path):
        return False
    if follow == "always":
        return True
    try:
        return time.time() - os.stat(path).st_mtime < idle_s
    except OSError:
        return False


def follow_options(idle_s: float) -> dict[str, str]:
    """FFmpeg ``file`` protocol options that follow a growing file until ``idle_s`` seconds without new data."""
    return {"follow": "1", "rw_timeout": str(round(idle_s * 1e6)), "seekable": "0"}


def followed_idle_s(container: av.container.InputContainer) -> float | None:
    """The ``idle_s`` a container was opened with by :func:`follow_options`, None when it is not followed."""
    options = getattr(container, "options", None) or {}
    return int(options["rw_timeout"]) / 1e6 if options.get("follow") == "1" else None


def writer_idle(path: str, idle_s: float) -> bool:
    """True when the file has not changed for about ``idle_s`` seconds (its writer stopped)."""
    try:
        return time.time() - os.stat(path).st_mtime >= IDLE_SLACK * idle_s
    except OSError:
        return False

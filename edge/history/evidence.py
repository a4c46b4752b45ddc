"""Evidence images on disk: for each sighting that wants them (:attr:`Sighting.wants_evidence`), its crop (the JPEG
the edge sent, or an event's box cut from its frame) and an event's annotated frame, as JPEG files under
``<history folder>/evidence/<camera>/<YYYY-MM-DD>/`` (UTC capture day), ``0600`` in ``0700`` folders.

Every image is written through :func:`leaving_image`, the one step between the pixels the edge holds and a file
another person may open.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np

from vcascade.core.private_files import DIR_MODE, FILE_MODE, open_private
from vcascade.edge.history.records import Sighting
from vcascade.edge.history.store import FULL_ERRNOS, StoredEvidence

EVIDENCE_FOLDER = "evidence"
"""Folder of the images inside the history folder."""



def leaving_image(jpeg: bytes) -> bytes:
    """The bytes written for an evidence image (JPEG in, JPEG out): the one place every evidence image passes."""
    return jpeg


def encode(pixels: np.ndarray, quality: int) -> bytes:
    """JPEG of (h, w, 3) uint8 BGR ``pixels`` at ``quality`` (1..100). Raises ValueError: OpenCV failed."""
    ok, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"JPEG encoding failed for an image of shape {pixels.shape}")
    return buf.tobytes()


def drop_reason(exc: BaseException) -> str:
    """``disk_full`` for a full disk (:data:`FULL_ERRNOS`), ``store_error`` for any other failure."""
    return "disk_full" if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS else "store_error"


class EvidenceFolder:
    """Writes and removes the evidence files of one history folder.

    Args:
        folder: the history folder (images go in its ``evidence`` folder).
        jpeg_quality: quality of the images this encodes (an event's crop and frame; a result's crop is the JPEG
            the edge sent, written as it is).
        file_mode, dir_mode: permission modes (they hold pictures of people).
    """

    def __init__(self, folder: Path, jpeg_quality: int = 80, file_mode: int = FILE_MODE, dir_mode: int = DIR_MODE):
        self.folder = Path(folder)
        self.quality, self.file_mode, self.dir_mode = jpeg_quality, file_mode, dir_mode

    def write(self, sighting: Sighting) -> tuple[StoredEvidence, list[tuple[str, str]]]:
        """Write the images of ``sighting``.

        Returns:
            What was written (paths relative to the history folder, bytes), and (image, reason) for each image
            that could not be (``disk_full``, ``store_error``; the sighting is still stored without it).
        """
        images: dict[str, bytes | None] = {}
        if sighting.crop_jpeg is not None:
            images["crop"] = sighting.crop_jpeg
        elif sighting.frame is not None and sighting.frame.crop is not None:
            images["crop"] = None  # encoded below, inside the error handling
        if sighting.frame is not None:
            images["frame"] = None
        stem = self._stem(sighting)
        paths: dict[str, str] = {}
        size = 0
        failed: list[tuple[str, str]] = []
        for image, data in images.items():
            relative = f"{stem}-{image}.jpg"
            try:
                if data is None:
                    frame = sighting.frame
                    assert frame is not None  # an image is None (to encode) only for an event's picture
                    pixels = frame.crop if image == "crop" else frame.annotated
                    data = encode(pixels, self.quality)
                size += self._write_file(relative, leaving_image(data))
                paths[image] = relative
            except (OSError, ValueError) as exc:
                failed.append((image, drop_reason(exc)))
        return StoredEvidence(paths.get("crop"), paths.get("frame"), size), failed

    def remove(self, paths: list[str] | tuple[str, ...]) -> None:
        """Delete evidence files (relative paths); a missing one is skipped."""
        for relative in paths:
            try:
                os.unlink(self.folder / relative)
            except FileNotFoundError:
                pass

    def _stem(self, sighting: Sighting) -> str:
        day = datetime.fromtimestamp(sighting.capture_unix_ms / 1000.0, timezone.utc).strftime("%Y-%m-%d")
        ref = re.sub(r"[^A-Za-z0-9_.-]", "_", sighting.ref)[:120]
        camera = re.sub(r"[^A-Za-z0-9_.-]", "_", sighting.camera)
        return f"{EVIDENCE_FOLDER}/{camera}/{day}/{ref}"

    def _write_file(self, relative: str, data: bytes) -> int:
        path = self.folder / relative
        fd = open_private(path, os.O_WRONLY | os.O_TRUNC, self.file_mode, self.dir_mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return len(data)

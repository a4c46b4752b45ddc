"""Evidence images on disk: for each sighting that wants them (:attr:`Sighting.wants_evidence`), its crop (the JPEG
the edge sent, or an event's box) and an event's annotated frame, as JPEG files under
``<history folder>/evidence/<camera>/<YYYY-MM-DD>/`` (UTC capture day), ``0600`` in ``0700`` folders.

Every image here was made by the redaction step (:mod:`vcascade.edge.privacy.redaction`): an event's pictures are
:class:`~vcascade.edge.privacy.redaction.RedactedImage` s for the ``snapshot`` exit, taken through
:func:`leaving_image`; a result's crop is the one made for the ``roi`` exit, kept only when its faces are redacted or
the camera's snapshots keep faces anyway (``PendingRoi.keep_crop``). Each file written counts as an image out of
the ``snapshot`` exit (``vcascade_edge_images_out_total``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from vcascade.core.private_files import DIR_MODE, FILE_MODE, open_private
from vcascade.edge.history.records import Sighting
from vcascade.edge.history.store import FULL_ERRNOS, StoredEvidence
from vcascade.edge.privacy.redaction import RedactedImage, require_redacted

EVIDENCE_FOLDER = "evidence"
"""Folder of the images inside the history folder."""


def leaving_image(image: RedactedImage) -> bytes:
    """The JPEG bytes of an event's picture; anything but a :class:`RedactedImage` made for the ``snapshot`` exit
    raises TypeError (:func:`vcascade.edge.privacy.redaction.require_redacted`)."""
    return require_redacted(image, "snapshot").jpeg


def drop_reason(exc: BaseException) -> str:
    """``disk_full`` for a full disk (:data:`FULL_ERRNOS`), ``store_error`` for any other failure."""
    return "disk_full" if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS else "store_error"


class EvidenceFolder:
    """Writes and removes the evidence files of one history folder.

    Args:
        folder: the history folder (images go in its ``evidence`` folder).
        file_mode, dir_mode: permission modes (they hold pictures of people).
        count: called with (``"snapshot"``, redacted) for each image written
            (:meth:`vcascade.edge.metrics.EdgeTelemetry.image_out`; None: not counted).
    """

    def __init__(self, folder: Path, file_mode: int = FILE_MODE, dir_mode: int = DIR_MODE,
                 count: Callable[[str, bool], None] | None = None) -> None:  # fmt: skip
        self.folder = Path(folder)
        self.file_mode, self.dir_mode, self.count = file_mode, dir_mode, count

    def write(self, sighting: Sighting) -> tuple[StoredEvidence, list[tuple[str, str]]]:
        """Write the images of ``sighting``.

        Returns:
            What was written (paths relative to the history folder, bytes), and (image, reason) for each image
            that could not be (``disk_full``, ``store_error``; the sighting is still stored without it).
        """
        images: dict[str, tuple[bytes, bool]] = {}
        frame = sighting.frame
        if sighting.crop_jpeg is not None:
            images["crop"] = (sighting.crop_jpeg, sighting.crop_redacted)
        elif frame is not None and frame.crop is not None:
            images["crop"] = (leaving_image(frame.crop), frame.crop.redacted)
        if frame is not None:
            images["frame"] = (leaving_image(frame.annotated), frame.annotated.redacted)
        stem = self._stem(sighting)
        paths: dict[str, str] = {}
        size = 0
        failed: list[tuple[str, str]] = []
        for image, (data, redacted) in images.items():
            relative = f"{stem}-{image}.jpg"
            try:
                size += self._write_file(relative, data)
                paths[image] = relative
            except OSError as exc:
                failed.append((image, drop_reason(exc)))
                continue
            if self.count is not None:
                self.count("snapshot", redacted)
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

"""Notice a store that lost its data, and never hand out an id that already named someone.

A Redis server restarted without persistence, flushed, or pointed at another database comes back empty: its id
counter starts from 1 again and its versions from 0. Ids are meant to be never reused (:mod:`.store`), so a
worker that took ids 1-9 from such a store would give a new person the id an earlier person had in every
result, event and history record. The guard keeps, per worker:

- the **watermark**: the highest id this worker has seen (reserved, or read in the store's changes);
- the store's **generation**: a random token the store keeps (:meth:`IdentityStore.generation`), set when the
  store is first used and gone with its data.

Both are kept in a small file (mode 0600, :mod:`vcascade.core.private_files`) so that a worker restarted after
the store lost its data still knows. A changed generation, or a counter below the watermark, is logged as an
error and counted (``vcascade_identity_store_resets_total{reason}``); the sync then raises the store's counter
above the watermark (:meth:`IdentityStore.raise_ids`) and refuses any reserved id at or below it (counted as
``vcascade_identity_ids_refused_total``), and reads the store's changes from the start again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.core.private_files import FILE_MODE, make_private_dir, open_private

log = logging.getLogger(__name__)


class IdGuard:
    """The watermark and generation of one worker's identity space, persisted in ``path`` (None: memory only).

    Args:
        path: the watermark file (JSON ``{"max_id", "generation"}``); created with ``file_mode``. A file that
            cannot be read is logged and started afresh (the store's own state is then the only guard).
        telemetry: the worker's identity metrics (resets and refused ids).
        file_mode: permission mode of the file.
    """

    def __init__(self, path: Path | None, telemetry: IdentityTelemetry, file_mode: int = FILE_MODE) -> None:
        self.path, self.telemetry, self.file_mode = path, telemetry, file_mode
        self.max_id, self.generation = 0, ""
        self._saved = (0, "")
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                self.max_id, self.generation = int(data["max_id"]), str(data["generation"])
                self._saved = (self.max_id, self.generation)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("identity watermark %s unreadable (%s): starting afresh", path, exc)

    def check_generation(self, generation: str) -> bool:
        """The store answers ``generation``: True when it is the one known (or the first seen), False when it
        changed (the store lost its data; logged and counted)."""
        known, self.generation = self.generation, generation
        if not known or known == generation:
            return True
        log.error("identity store lost its data (generation %s, was %s): ids stay above %d", generation, known,
                  self.max_id)  # fmt: skip
        self.telemetry.store_reset("generation_changed")
        return False

    def counter_went_back(self, last_id: int) -> bool:
        """The store's id counter reads ``last_id``: True (logged and counted) when it is below the watermark."""
        if last_id >= self.max_id:
            return False
        log.error("identity store's id counter went back to %d below %d already seen: ids stay above %d", last_id,
                  self.max_id, self.max_id)  # fmt: skip
        self.telemetry.store_reset("ids_went_back")
        return True

    def accept(self, ids: list[int]) -> list[int]:
        """The reserved ``ids`` above the watermark (the rest counted as refused); the watermark moves up."""
        fresh = [ident for ident in ids if ident > self.max_id]
        if len(fresh) < len(ids):
            self.telemetry.ids_refused(len(ids) - len(fresh))
        self.saw(fresh)
        return fresh

    def saw(self, ids: list[int]) -> None:
        """Ids seen in the store (its changes): the watermark moves up to the largest."""
        if ids:
            self.max_id = max(self.max_id, max(ids))

    def save(self) -> None:
        """Write the file when the watermark or generation changed (atomically: a new file renamed over it)."""
        if self.path is None or (self.max_id, self.generation) == self._saved:
            return
        try:
            make_private_dir(self.path.parent)
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC, self.file_mode)
            with os.fdopen(fd, "w") as out:
                json.dump({"max_id": self.max_id, "generation": self.generation}, out)
            os.replace(tmp, self.path)
            self._saved = (self.max_id, self.generation)
        except OSError as exc:
            log.error("identity watermark %s cannot be written: %s", self.path, exc)

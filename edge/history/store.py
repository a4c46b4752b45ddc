"""What every history store offers (:class:`HistoryStore`), and the plain types it takes and gives.

The writer (:mod:`vcascade.edge.history.writer`) is the only one that writes, on its own thread; ``vcascade search``
reads. A store raises :class:`StoreFull` when its disk or database is full and :class:`StoreDown` when it cannot be
reached or written for another reason; the writer counts the records of that batch as dropped with that reason.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any, Protocol

from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.records import CameraStateRecord, IdentityLearned, Sighting

ROW_BYTES = 256
"""Bytes one row is counted for in the retention's byte budget, on top of its evidence files: an estimate of a
row with its indexes in SQLite (measured by ``python -m tools.bench_history``: docs/BENCHMARKS.md)."""


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""OS errors that mean the disk (or the process's share of it) is full."""


INDEXES = """
CREATE INDEX IF NOT EXISTS sightings_identity ON sightings (identity, capture_unix_ms);
CREATE INDEX IF NOT EXISTS sightings_camera ON sightings (camera, capture_unix_ms);
CREATE INDEX IF NOT EXISTS sightings_time ON sightings (capture_unix_ms);
CREATE INDEX IF NOT EXISTS sightings_event ON sightings (event_type, place, capture_unix_ms);
CREATE INDEX IF NOT EXISTS camera_states_camera ON camera_states (camera, wall_ts_ms);
CREATE INDEX IF NOT EXISTS merges_into ON merges (into_id);
"""
"""The indexes of both stores (the same SQL in SQLite and PostgreSQL): an identity's, a camera's and an event
type's rows by capture time, camera states by camera, merges by the id merged into; for the queries of
:mod:`vcascade.edge.history.query`."""


class StoreDown(Exception):
    """The store cannot be written now (locked, unreachable, I/O error). Recovery: the writer counts the batch as
    dropped (``store_error``) and tries again with the next one."""


class StoreFull(StoreDown):
    """The disk or the database is full. Recovery: counted as dropped (``disk_full``); retention frees space."""


@dataclass(frozen=True)
class StoredEvidence:
    """Evidence files of one sighting: paths relative to the store's folder (None: not kept) and their bytes."""

    crop_path: str | None = None
    frame_path: str | None = None
    bytes: int = 0


@dataclass(frozen=True)
class Evicted:
    """A row retention removed: its camera, kind, counted bytes and evidence files (relative paths)."""

    camera: str
    kind: str
    bytes: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class WriteOutcome:
    """What one :meth:`HistoryStore.write` kept: the sightings stored, and those refused as already stored."""

    stored: int
    duplicates: list[Sighting]


class HistoryStore(Protocol):
    """A history store (embedded SQLite: :class:`vcascade.edge.history.sqlite_store.SqliteHistory`)."""

    def write(
        self, sightings: list[tuple[Sighting, StoredEvidence]], updates: list[IdentityLearned],
        states: list[CameraStateRecord],
    ) -> WriteOutcome:
        """Write one batch in one transaction (all or nothing). Raises :class:`StoreFull`, :class:`StoreDown`."""
        ...

    def evict_older(self, cutoff_ms: float, camera: str | None, limit: int) -> list[Evicted]:
        """Remove at most ``limit`` rows captured before ``cutoff_ms`` (of ``camera``; None: any), oldest first."""
        ...

    def evict_over(self, max_bytes: int, camera: str | None, limit: int) -> list[Evicted]:
        """Remove the oldest rows (of ``camera``; None: all) until their bytes are at most ``max_bytes``, at most
        ``limit`` rows per call."""
        ...

    def usage(self) -> dict[str, tuple[int, int]]:
        """Rows and bytes per camera: ``{camera: (rows, bytes)}``."""
        ...

    def query(self, query: HistoryQuery) -> list[dict[str, Any]]:
        """The rows answering ``query``, oldest first, each a dict of :data:`~vcascade.edge.history.query.COLUMNS`
        plus ``followed`` (the ids of an identity query, its merges included)."""
        ...

    def close(self) -> None: ...

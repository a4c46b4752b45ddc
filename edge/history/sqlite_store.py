"""The embedded history store: one SQLite file in WAL mode (docs/HISTORY.md).

WAL lets ``vcascade search`` read while an edge writes, and several edges of one host share the file (each write
is one ``BEGIN IMMEDIATE`` transaction; ``timeout_s`` bounds the wait for the lock). The ``usage`` table keeps rows
and bytes per camera in the same transactions as the rows, so retention never sums the table.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vcascade.core.private_files import DIR_MODE, FILE_MODE, create_private
from vcascade.edge.history.query import COLUMNS, MAX_MERGE_HOPS, HistoryQuery, sightings_sql
from vcascade.edge.history.records import CameraStateRecord, IdentityLearned, Sighting
from vcascade.edge.history.store import (
    INDEXES, FULL_ERRNOS, ROW_BYTES, Evicted, StoreDown, StoredEvidence, StoreFull, WriteOutcome,
)

DATABASE_FILE = "history.sqlite3"
"""Name of the database file in the history folder."""

PROGRESS_STEPS = 10_000
"""SQLite virtual-machine steps between two checks of a query's time budget (a few ms of work)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS sightings (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    ref TEXT NOT NULL UNIQUE,
    edge TEXT NOT NULL,
    camera TEXT NOT NULL,
    capture_unix_ms REAL NOT NULL,
    stream_ts_ms REAL NOT NULL,
    track_id INTEGER NOT NULL,
    class_name TEXT NOT NULL,
    identity INTEGER,
    worker TEXT NOT NULL DEFAULT '',
    text TEXT,
    label TEXT,
    event_type TEXT,
    place TEXT,
    direction TEXT,
    dwell_s REAL,
    crop_path TEXT,
    frame_path TEXT,
    bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS camera_states (
    id INTEGER PRIMARY KEY,
    edge TEXT NOT NULL,
    camera TEXT NOT NULL,
    wall_ts_ms REAL NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS merges (
    merged_id INTEGER NOT NULL,
    worker TEXT NOT NULL,
    into_id INTEGER NOT NULL,
    wall_ts_ms REAL NOT NULL,
    PRIMARY KEY (merged_id, worker, into_id)
);
CREATE TABLE IF NOT EXISTS usage (
    camera TEXT PRIMARY KEY,
    rows INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
""" + INDEXES

INSERT_COLUMNS = COLUMNS
INSERT = (
    f"INSERT INTO sightings ({', '.join(INSERT_COLUMNS)}) VALUES ({', '.join('?' * len(INSERT_COLUMNS))})"
)
ADD_USAGE = (
    "INSERT INTO usage (camera, rows, bytes) VALUES (?, ?, ?) "
    "ON CONFLICT (camera) DO UPDATE SET rows = rows + excluded.rows, bytes = bytes + excluded.bytes"
)


def sighting_row(sighting: Sighting, evidence: StoredEvidence) -> tuple:
    """The values of ``sighting`` in :data:`~vcascade.edge.history.query.COLUMNS` order."""
    s = sighting
    return (
        s.kind, s.ref, s.edge, s.camera, s.capture_unix_ms, s.stream_ts_ms, s.track_id, s.class_name, s.identity,
        s.worker, s.text, s.label, s.event_type, s.place, s.direction, s.dwell_s, evidence.crop_path,
        evidence.frame_path, ROW_BYTES + evidence.bytes,
    )


def usage_of(rows: list[tuple]) -> list[tuple[str, int, int]]:
    """(camera, rows, bytes) added per camera by ``rows`` (:func:`sighting_row` tuples)."""
    usage: dict[str, list[int]] = {}
    for row in rows:
        counted = usage.setdefault(row[3], [0, 0])
        counted[0] += 1
        counted[1] += row[-1]
    return [(camera, n, size) for camera, (n, size) in usage.items()]


def merge_rows(sighting: Sighting, wall_ts_ms: float) -> list[tuple]:
    """(merged_id, worker, into_id, wall_ts_ms) for each id a result says was merged into its identity: store ids
    with worker ``''``, provisional ids with the worker that issued them (the one that answered)."""
    if sighting.identity is None or sighting.identity < 0:
        return []
    return [(m, "" if m >= 0 else sighting.worker, sighting.identity, wall_ts_ms) for m in sighting.merged_from]


class SqliteHistory:
    """:class:`~vcascade.edge.history.store.HistoryStore` on ``folder/history.sqlite3``.

    Args:
        folder: the history folder (created ``dir_mode``; the file ``file_mode``, its ``-wal`` and ``-shm`` follow).
        timeout_s: longest wait for the write lock, s.
        readonly: open for queries only (``vcascade search``): the file must exist.
        budget_s: longest one query may run, s (None: unbounded); past it SQLite interrupts it and
            :meth:`query` raises StoreDown (the live view's HTTP search bounds its queries so).

    Raises:
        StoreDown: the file cannot be opened or its schema created. FileNotFoundError: ``readonly`` and no file.

    Thread: one thread per instance (SQLite connections are not shared).
    """

    def __init__(
        self, folder: str | Path, timeout_s: float = 2.0, readonly: bool = False, file_mode: int = FILE_MODE,
        dir_mode: int = DIR_MODE, budget_s: float | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.budget_s = budget_s
        self.path = self.folder / DATABASE_FILE
        try:
            if readonly:
                if not self.path.exists():
                    raise FileNotFoundError(f"no history store at {self.path}")
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=timeout_s)
            else:
                create_private(self.path, file_mode, dir_mode)
                self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise _store_error(exc) from exc

    # ------------------------------------------------------------------ writing

    def write(
        self, sightings: list[tuple[Sighting, StoredEvidence]], updates: list[IdentityLearned],
        states: list[CameraStateRecord],
    ) -> WriteOutcome:
        """One transaction: the sightings (a ``ref`` already stored, or twice in the batch, is refused and
        returned), their merges, the identities events learned, the camera states, and the usage per camera.

        Raises:
            StoreFull: ``SQLITE_FULL`` (disk or ``max_page_count``). StoreDown: locked past ``timeout_s``, I/O.
        """
        now_ms = time.time() * 1000.0
        with self._transaction():
            fresh, duplicates = self._fresh(sightings)
            rows = [sighting_row(s, ev) for s, ev in fresh]
            self._db.executemany(INSERT, rows)
            self._db.executemany(
                "INSERT OR IGNORE INTO merges VALUES (?, ?, ?, ?)",
                [merge for s, _ in fresh for merge in merge_rows(s, now_ms)],
            )
            self._db.executemany(
                "UPDATE sightings SET identity = COALESCE(?, identity), text = COALESCE(?, text) WHERE ref = ?",
                [(u.identity, u.text, u.event_id) for u in updates],
            )
            self._db.executemany(
                "INSERT INTO camera_states (edge, camera, wall_ts_ms, source, state, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(s.edge, s.camera, s.wall_ts_ms, s.source, s.state, s.reason) for s in states],
            )
            self._db.executemany(ADD_USAGE, usage_of(rows))
        return WriteOutcome(len(fresh), duplicates)

    def _fresh(
        self, sightings: list[tuple[Sighting, StoredEvidence]]
    ) -> tuple[list[tuple[Sighting, StoredEvidence]], list[Sighting]]:
        """The sightings whose ``ref`` is new (to the store and earlier in the batch), and the others."""
        refs = [s.ref for s, _ in sightings]
        stored: set[str] = set()
        for start in range(0, len(refs), 900):  # bound the statement's parameters
            part = refs[start:start + 900]
            found = self._db.execute(f"SELECT ref FROM sightings WHERE ref IN ({', '.join('?' * len(part))})", part)
            stored.update(row[0] for row in found)
        fresh, duplicates = [], []
        for sighting, evidence in sightings:
            if sighting.ref in stored:
                duplicates.append(sighting)
            else:
                stored.add(sighting.ref)
                fresh.append((sighting, evidence))
        return fresh, duplicates

    # ------------------------------------------------------------------ retention

    def evict_older(self, cutoff_ms: float, camera: str | None, limit: int) -> list[Evicted]:
        """Remove at most ``limit`` rows captured before ``cutoff_ms`` (of ``camera``; None: any) and the camera
        states older than it. Raises :class:`StoreDown`."""
        where, params = ("camera = ? AND ", [camera]) if camera is not None else ("", [])
        select = (
            f"SELECT id, camera, kind, bytes, crop_path, frame_path FROM sightings "
            f"WHERE {where}capture_unix_ms < ? ORDER BY capture_unix_ms LIMIT ?"
        )
        evicted = self._evict(select, [*params, cutoff_ms, limit])
        self._run(f"DELETE FROM camera_states WHERE {where}wall_ts_ms < ?", [*params, cutoff_ms])
        return evicted

    def evict_over(self, max_bytes: int, camera: str | None, limit: int) -> list[Evicted]:
        """Remove the oldest rows (of ``camera``; None: all) until their bytes are at most ``max_bytes``, at most
        ``limit`` per call. Raises :class:`StoreDown`."""
        usage = self.usage()
        held = sum(b for cam, (_, b) in usage.items() if camera is None or cam == camera)
        if held <= max_bytes:
            return []
        where, params = ("WHERE camera = ? ", [camera]) if camera is not None else ("", [])
        # the oldest rows whose running total of bytes reaches the excess (a window sum, SQLite >= 3.25)
        select = (
            "SELECT id, camera, kind, bytes, crop_path, frame_path FROM ("
            "SELECT id, camera, kind, bytes, crop_path, frame_path, capture_unix_ms, "
            "SUM(bytes) OVER (ORDER BY capture_unix_ms, id) - bytes AS before "
            f"FROM (SELECT * FROM sightings {where}ORDER BY capture_unix_ms, id LIMIT ?)) WHERE before < ?"
        )
        return self._evict(select, [*params, limit, held - max_bytes])

    def _evict(self, select: str, params: list) -> list[Evicted]:
        with self._transaction():
            rows = self._db.execute(select, params).fetchall()
            self._db.executemany("DELETE FROM sightings WHERE id = ?", [(r[0],) for r in rows])
            freed: dict[str, list[int]] = {}
            for _, cam, _, size, _, _ in rows:
                counted = freed.setdefault(cam, [0, 0])
                counted[0] += 1
                counted[1] += size
            self._db.executemany(
                "UPDATE usage SET rows = rows - ?, bytes = bytes - ? WHERE camera = ?",
                [(n, size, cam) for cam, (n, size) in freed.items()],
            )
        return [
            Evicted(cam, kind, size, tuple(p for p in (crop, frame) if p)) for _, cam, kind, size, crop, frame in rows
        ]

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` (the write lock, waited for up to ``timeout_s``) ... ``COMMIT``; rolled back on any
        error. Raises StoreFull or StoreDown for SQLite's errors (:func:`_store_error`)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc

    def _run(self, sql: str, params: list) -> None:
        try:
            self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc

    def usage(self) -> dict[str, tuple[int, int]]:
        """Rows and bytes per camera, ``{camera: (rows, bytes)}``. Raises :class:`StoreDown`."""
        try:
            return {cam: (rows, size) for cam, rows, size in self._db.execute("SELECT camera, rows, bytes FROM usage")}
        except sqlite3.Error as exc:
            raise _store_error(exc) from exc

    # ------------------------------------------------------------------ queries

    def cameras(self) -> set[str]:
        """Every camera with a row or a state change in the store."""
        found = self._db.execute("SELECT camera FROM usage UNION SELECT DISTINCT camera FROM camera_states")
        return {row[0] for row in found}

    def followed_identities(self, identity: int) -> list[tuple[int, str]]:
        """``identity`` and every id merged into it, (id, worker) pairs (module docstring of
        :mod:`vcascade.edge.history.query`)."""
        found = {(identity, "")}
        frontier = [identity]
        for _ in range(MAX_MERGE_HOPS):
            if not frontier:
                break
            marks = ", ".join("?" * len(frontier))
            rows = self._db.execute(f"SELECT merged_id, worker FROM merges WHERE into_id IN ({marks})", frontier)
            new = [(m, w) for m, w in rows if (m, w) not in found]
            found.update(new)
            frontier = [m for m, w in new if not w]
        return sorted(found)

    def query(self, query: HistoryQuery) -> list[dict[str, Any]]:
        """The rows answering ``query``, oldest first (module docstring of :mod:`vcascade.edge.history.query`);
        each row also has ``followed``: the ids an identity query stood for (``[]`` otherwise).

        Raises:
            StoreDown: it ran past ``budget_s``, or SQLite failed.
        """
        if self.budget_s is not None:
            deadline = time.monotonic() + self.budget_s
            self._db.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
        try:
            identities = None if query.identity is None else self.followed_identities(query.identity)
            sql = sightings_sql(query, identities)
            rows = [dict(zip(COLUMNS, row)) for row in self._db.execute(sql.text, sql.params)]
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise StoreDown(f"history store: the query ran past its budget of {self.budget_s:g} s") from None
            raise _store_error(exc) from exc
        finally:
            self._db.set_progress_handler(None, 0)
        followed = [] if identities is None else [i for i, _ in identities]
        for row in rows:
            row["followed"] = followed
        return rows[::-1]

    def camera_states(self, camera: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` state changes (of ``camera``), oldest first."""
        where, params = ("WHERE camera = ? ", [camera]) if camera else ("", [])
        rows = self._db.execute(
            f"SELECT edge, camera, wall_ts_ms, source, state, reason FROM camera_states {where}"
            "ORDER BY wall_ts_ms DESC LIMIT ?", [*params, limit],
        )
        keys = ("edge", "camera", "wall_ts_ms", "source", "state", "reason")
        return [dict(zip(keys, row)) for row in rows][::-1]

    def close(self) -> None:
        self._db.close()


def _store_error(exc: sqlite3.Error | OSError) -> StoreDown:
    """``SQLITE_FULL`` or a full disk becomes :class:`StoreFull`, anything else :class:`StoreDown`, with the
    message of SQLite or the OS."""
    if isinstance(exc, OSError):
        full = exc.errno in FULL_ERRNOS
        return StoreFull(f"history store full: {exc}") if full else StoreDown(f"history store: {exc}")
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(exc):
        return StoreFull(f"history store full: {exc}")
    return StoreDown(f"history store: {exc}")

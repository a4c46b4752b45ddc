"""Embedded identity store: one SQLite file in WAL mode, shared by the worker processes of one host.

Why SQLite: it ships with Python, needs no server, and in WAL mode readers never block the one writer, so
several worker processes on one host share a space safely through the file (SQLite's locking; not over network
file systems). Every write runs in its own ``BEGIN IMMEDIATE`` transaction (the writer lock taken up front, so
two workers never deadlock upgrading a read lock); ``timeout_s`` bounds the wait for it. Ids come from an
``AUTOINCREMENT`` key, which SQLite never reuses even after rows are deleted. A push is one transaction, and the
``writers`` table keeps each writer's highest applied write number (a push sent again after its answer was
lost is skipped) and the updates its latest push dropped (answered again, so they are counted once).
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path

import numpy as np

from vcascade.center.identity.store import (
    EVICTED,
    LIVE,
    MALFORMED,
    MERGED,
    WRITER_TTL_S,
    Sighting,
    StoredIdentity,
    StoreWrite,
    add_sighting,
    keep_latest,
)
from vcascade.core.private_files import DIR_MODE, FILE_MODE, create_private

RESERVED = "reserved"
"""State of an id handed to a worker and not yet written."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    space TEXT NOT NULL,
    state TEXT NOT NULL,
    vector_sum BLOB,
    count INTEGER NOT NULL DEFAULT 0,
    camera TEXT NOT NULL DEFAULT '',
    t_ms REAL NOT NULL DEFAULT 0,
    wall_s REAL NOT NULL DEFAULT 0,
    merged_into INTEGER NOT NULL DEFAULT -1,
    version INTEGER NOT NULL DEFAULT 0,
    first BLOB,
    enrolled_version INTEGER NOT NULL DEFAULT 0,
    exemplars BLOB
);
CREATE INDEX IF NOT EXISTS identities_changes ON identities (space, version);
CREATE INDEX IF NOT EXISTS identities_seen ON identities (space, state, wall_s);
CREATE TABLE IF NOT EXISTS versions (space TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS generations (space TEXT PRIMARY KEY, token TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS writers (
    space TEXT NOT NULL,
    writer TEXT NOT NULL,
    seq INTEGER NOT NULL,
    push INTEGER NOT NULL,
    dropped INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    PRIMARY KEY (space, writer)
);
"""

ADDED_COLUMNS = {"first": "BLOB", "enrolled_version": "INTEGER NOT NULL DEFAULT 0", "exemplars": "BLOB"}
"""Columns a file written before the store kept enrolments (or galleries) lacks (added on open; its rows read as
None, 0, None)."""

MAX_MERGE_HOPS = 64
"""Longest chain of merges followed when an update names a merged identity."""


class SqliteStore:
    """:class:`vcascade.center.identity.store.IdentityStore` on a SQLite file.

    Args:
        path: database file (its folder is created).
        space: identity space name (the recognizer's).
        timeout_s: longest wait for the write lock, s (``sqlite3.OperationalError: database is locked`` after).
        file_mode, dir_mode: permission modes of the file and of the folders created for it (an embedding of
            every person seen: owner only by default; :mod:`vcascade.core.private_files`).
        exemplars: gallery looks kept per identity besides its enrolment embedding, the latest (0: none;
            :mod:`.gallery`).

    Raises:
        sqlite3.Error: the file cannot be opened or is not a database.
    """

    def __init__(self, path: str | Path, space: str, timeout_s: float = 2.0, file_mode: int = FILE_MODE,
                 dir_mode: int = DIR_MODE, exemplars: int = 0) -> None:
        create_private(path, file_mode, dir_mode)  # SQLite gives its -wal and -shm files this file's mode
        self.space, self.exemplars = space, int(exemplars)
        self._db = sqlite3.connect(str(Path(path).expanduser()), timeout=timeout_s, isolation_level=None,
                                   check_same_thread=False)  # fmt: skip
        self._set_up(timeout_s)

    def _set_up(self, timeout_s: float) -> None:
        """Switch the file to WAL and create or upgrade its tables (in one ``BEGIN IMMEDIATE`` transaction).

        Workers opening a new file at once meet here, and SQLite answers ``database is locked`` at once, without
        its busy timeout, where waiting could deadlock (https://www.sqlite.org/c3ref/busy_handler.html: two
        connections holding a read lock that both want to write); so a locked set-up is tried again until
        ``timeout_s`` is spent, then raised.
        """
        deadline, pause_s = time.monotonic() + timeout_s, 0.01
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across process crashes (not power loss)
                with self._transaction() as db:
                    for statement in filter(str.strip, SCHEMA.split(";")):
                        db.execute(statement)
                    have = {row[1] for row in db.execute("PRAGMA table_info(identities)")}
                    for name, kind in ADDED_COLUMNS.items():
                        if name not in have:
                            db.execute(f"ALTER TABLE identities ADD COLUMN {name} {kind}")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause_s > deadline:
                    raise
                time.sleep(pause_s)
                pause_s = min(2 * pause_s, 0.2)

    def reserve_ids(self, n: int) -> list[int]:
        with self._transaction() as db:
            return [db.execute("INSERT INTO identities (space, state) VALUES (?, ?) RETURNING id",
                               (self.space, RESERVED)).fetchone()[0] for _ in range(n)]  # fmt: skip

    def write(self, writes: list[StoreWrite], writer: str | None = None, first_seq: int = 0) -> int:
        with self._transaction() as db:
            if writer is None:
                return sum(not self._write_one(db, w) for w in writes)
            applied, push, dropped = self._writer(db, writer)
            if push != first_seq:  # a new push, not one sent again
                dropped = 0
            for seq, w in enumerate(writes, first_seq):
                if seq > applied:
                    dropped += not self._write_one(db, w)
            if writes:  # stamped with the workers' wall clock, as the sweep's retention is
                db.execute("INSERT OR REPLACE INTO writers (space, writer, seq, push, dropped, wall_s) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           (self.space, writer, max(applied, first_seq + len(writes) - 1), first_seq, dropped,
                            max(w.seen.wall_s for w in writes)))  # fmt: skip
            return dropped

    def changes(self, cursor: int) -> tuple[list[StoredIdentity], int]:
        rows = self._db.execute(
            "SELECT id, state, vector_sum, count, camera, t_ms, wall_s, merged_into, first, enrolled_version, "
            "exemplars, version "
            "FROM identities "
            "WHERE space = ? AND version > ? AND state != ? ORDER BY version", (self.space, cursor, RESERVED),
        ).fetchall()
        found = [_stored_or_malformed(row) for row in rows]
        return found, max([cursor, *(row[-1] for row in rows)])

    def generation(self) -> str:
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO generations (space, token) VALUES (?, ?)",
                       (self.space, secrets.token_hex(8)))  # fmt: skip
            return db.execute("SELECT token FROM generations WHERE space = ?", (self.space,)).fetchone()[0]

    def raise_ids(self, floor: int) -> None:
        with self._transaction() as db:  # AUTOINCREMENT hands out max(seq, largest id) + 1
            if db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'identities'", (floor,)).rowcount:
                return
            db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('identities', ?)", (floor,))

    def merge(self, loser: int, survivor: int) -> bool:
        with self._transaction() as db:
            survivor = self._follow_merges(db, survivor)
            a, b = self._live(db, loser), None if survivor is None else self._live(db, survivor)
            if a is None or b is None or loser == survivor:
                return False
            version = self._bump(db)
            seen = add_sighting(a[2], b[2])
            kept = keep_latest(b[3], a[3], self.exemplars)
            db.execute("UPDATE identities SET vector_sum = ?, count = ?, camera = ?, t_ms = ?, wall_s = ?, "
                       "exemplars = ?, version = ? WHERE id = ?",
                       (_blob(a[0] + b[0]), a[1] + b[1], seen.camera, seen.t_ms, seen.wall_s, _blob_or_none(kept),
                        version, survivor))  # fmt: skip
            db.execute("UPDATE identities SET state = ?, vector_sum = NULL, exemplars = NULL, merged_into = ?, "
                       "version = ? WHERE id = ?",
                       (MERGED, survivor, version, loser))  # fmt: skip
            return True

    def sweep(self, now_s: float, retention_s: float, capacity: int) -> int:
        with self._transaction() as db:
            old = [r[0] for r in db.execute("SELECT id FROM identities WHERE space = ? AND state = ? AND wall_s < ?",
                                            (self.space, LIVE, now_s - retention_s))]  # fmt: skip
            live = db.execute("SELECT COUNT(*) FROM identities WHERE space = ? AND state = ?", (self.space, LIVE))
            excess = live.fetchone()[0] - len(old) - capacity
            if excess > 0:
                old += [r[0] for r in db.execute(
                    "SELECT id FROM identities WHERE space = ? AND state = ? AND wall_s >= ? ORDER BY wall_s LIMIT ?",
                    (self.space, LIVE, now_s - retention_s, excess))]  # fmt: skip
            if old:
                version = self._bump(db)
                db.executemany("UPDATE identities SET state = ?, vector_sum = NULL, exemplars = NULL, version = ? "
                               "WHERE id = ?",
                               [(EVICTED, version, ident) for ident in old])  # fmt: skip
            db.execute("DELETE FROM writers WHERE space = ? AND wall_s < ?", (self.space, now_s - WRITER_TTL_S))
            return len(old)

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ internals

    def _transaction(self) -> "_Immediate":
        return _Immediate(self._db)

    def _bump(self, db: sqlite3.Connection) -> int:
        return db.execute(
            "INSERT INTO versions (space, version) VALUES (?, 1) ON CONFLICT(space) DO UPDATE SET version = version + 1 "
            "RETURNING version", (self.space,),
        ).fetchone()[0]

    def _writer(self, db: sqlite3.Connection, writer: str) -> tuple[int, int | None, int]:
        """``writer``'s highest applied write number (-1: none), the first number of its latest push (None:
        none) and the updates that push dropped."""
        row = db.execute("SELECT seq, push, dropped FROM writers WHERE space = ? AND writer = ?",
                         (self.space, writer)).fetchone()  # fmt: skip
        return (-1, None, 0) if row is None else row

    def _live(self, db: sqlite3.Connection, ident: int
              ) -> tuple[np.ndarray, int, Sighting, np.ndarray | None] | None:  # fmt: skip
        row = db.execute("SELECT state, vector_sum, count, camera, t_ms, wall_s, exemplars FROM identities WHERE "
                         "id = ? AND space = ?", (ident, self.space)).fetchone()  # fmt: skip
        if row is None or row[0] != LIVE:
            return None
        total = np.frombuffer(row[1], dtype=np.float32).copy()
        return total, row[2], Sighting(row[3], row[4], row[5]), _rows(row[6], len(total))

    def _write_one(self, db: sqlite3.Connection, w: StoreWrite) -> bool:
        ident = self._follow_merges(db, w.identity_id)
        if ident is None:
            return False
        current = self._live(db, ident)
        if current is None and not w.enrol:
            return False
        version = self._bump(db)
        if current is None:  # the enrolment lands
            db.execute("UPDATE identities SET first = ?, enrolled_version = ? WHERE id = ?",
                       (None if w.first is None else _blob(w.first), version, ident))  # fmt: skip
        total, count, seen = (w.sum_delta, w.count_delta, w.seen) if current is None else (
            current[0] + w.sum_delta, current[1] + w.count_delta, add_sighting(current[2], w.seen))
        kept = keep_latest(None if current is None else current[3], w.exemplars, self.exemplars)
        db.execute("UPDATE identities SET state = ?, vector_sum = ?, count = ?, camera = ?, t_ms = ?, wall_s = ?, "
                   "exemplars = ?, version = ? WHERE id = ?",
                   (LIVE, _blob(total), count, seen.camera, seen.t_ms, seen.wall_s, _blob_or_none(kept), version,
                    ident))  # fmt: skip
        return True

    def _follow_merges(self, db: sqlite3.Connection, ident: int) -> int | None:
        """The id an update of ``ident`` lands on: itself, or its survivor; None when evicted or unknown."""
        for _ in range(MAX_MERGE_HOPS):
            row = db.execute("SELECT state, merged_into FROM identities WHERE id = ? AND space = ?",
                             (ident, self.space)).fetchone()  # fmt: skip
            if row is None or row[0] == EVICTED:
                return None
            if row[0] != MERGED:
                return ident
            ident = row[1]
        return None


class _Immediate:
    """``with``: a ``BEGIN IMMEDIATE`` transaction, committed on success and rolled back on an exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, exc, tb) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _blob_or_none(rows: np.ndarray | None) -> bytes | None:
    return None if rows is None else _blob(rows)


def _rows(blob: bytes | None, dim: int) -> np.ndarray | None:
    """float32 (k, dim) exemplars from their bytes (None: none); ValueError when they are not whole rows."""
    if blob is None:
        return None
    flat = np.frombuffer(blob, dtype=np.float32)
    if dim <= 0 or flat.size % dim:
        raise ValueError(f"exemplars of {flat.size} values are not rows of {dim}")
    return flat.reshape(-1, dim).copy()


def _stored_or_malformed(row: tuple) -> StoredIdentity:
    """The record of a row; :data:`MALFORMED` when a column cannot be read (another program wrote it)."""
    try:
        return _stored(row)
    except (TypeError, ValueError):
        return StoredIdentity(int(row[0]), MALFORMED)


def _stored(row: tuple) -> StoredIdentity:
    ident, state, blob, count, camera, t_ms, wall_s, merged_into, first, enrolled_version, exemplars, _ = row
    if state != LIVE:
        return StoredIdentity(ident, state, merged_into=merged_into)
    total = np.frombuffer(blob, dtype=np.float32).copy()
    return StoredIdentity(ident, state, total, count, Sighting(camera, t_ms, wall_s),
                          first=None if first is None else np.frombuffer(first, dtype=np.float32).copy(),
                          enrolled_version=enrolled_version, exemplars=_rows(exemplars, len(total)))  # fmt: skip

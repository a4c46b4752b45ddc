"""The history store on a PostgreSQL server, for edges on several hosts (docs/HISTORY.md): the same rows, queries
and retention as the embedded SQLite store (:mod:`vcascade.edge.history.sqlite_store`), shared by every edge
that names the server; the evidence images stay in each edge's history folder (a shared volume makes them
readable from every host).

Each write is one transaction; ``timeout_s`` bounds the connection, each statement and each lock wait, so a slow
or stopped server fails a batch (counted by the writer) instead of holding the edge's history thread. The schema
is created under an advisory lock, so edges starting together do not race.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import errors

from vcascade.core.redact import redact
from vcascade.edge.history.query import COLUMNS, MAX_MERGE_HOPS, HistoryQuery, sightings_sql
from vcascade.edge.history.records import CameraStateRecord, IdentityLearned, Sighting
from vcascade.edge.history.sqlite_store import merge_rows, sighting_row, usage_of
from vcascade.edge.history.store import INDEXES, Evicted, StoreDown, StoredEvidence, StoreFull, WriteOutcome

SCHEMA_LOCK = 7_351_202_612
"""Advisory lock key held while the schema is created."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS sightings (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    ref TEXT NOT NULL UNIQUE,
    edge TEXT NOT NULL,
    camera TEXT NOT NULL,
    capture_unix_ms DOUBLE PRECISION NOT NULL,
    stream_ts_ms DOUBLE PRECISION NOT NULL,
    track_id BIGINT NOT NULL,
    class_name TEXT NOT NULL,
    identity BIGINT,
    worker TEXT NOT NULL DEFAULT '',
    text TEXT,
    label TEXT,
    event_type TEXT,
    place TEXT,
    direction TEXT,
    dwell_s DOUBLE PRECISION,
    crop_path TEXT,
    frame_path TEXT,
    bytes BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS camera_states (
    id BIGSERIAL PRIMARY KEY,
    edge TEXT NOT NULL,
    camera TEXT NOT NULL,
    wall_ts_ms DOUBLE PRECISION NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS merges (
    merged_id BIGINT NOT NULL,
    worker TEXT NOT NULL,
    into_id BIGINT NOT NULL,
    wall_ts_ms DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (merged_id, worker, into_id)
);
CREATE TABLE IF NOT EXISTS usage (
    camera TEXT PRIMARY KEY,
    rows BIGINT NOT NULL,
    bytes BIGINT NOT NULL
);
""" + INDEXES

INSERT = f"INSERT INTO sightings ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
"""A plain insert: the batch's refs were checked in the same transaction (``ON CONFLICT`` would make each row a
speculative insertion, measurably slower); a ref another edge stores meanwhile fails the batch (``store_error``)."""
ADD_USAGE = (
    "INSERT INTO usage (camera, rows, bytes) SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) "
    "ON CONFLICT (camera) DO UPDATE SET rows = usage.rows + excluded.rows, bytes = usage.bytes + excluded.bytes"
)
"""Rows and bytes added per camera, one statement for every camera of a batch (arrays of equal length)."""
EVICTED_COLUMNS = "camera, kind, bytes, crop_path, frame_path"


class PostgresHistory:
    """:class:`~vcascade.edge.history.store.HistoryStore` on a PostgreSQL database.

    Args:
        url: libpq URL (``postgresql://user:password@host:5432/db``).
        timeout_s: longest connect, statement and lock wait, s.
        readonly: queries only (``vcascade search``): the session is read-only and creates nothing.

    Raises:
        StoreDown: the server cannot be reached, or the schema cannot be created.

    Thread: one thread per instance.
    """

    def __init__(self, url: str, timeout_s: float = 2.0, readonly: bool = False) -> None:
        ms = max(1, int(timeout_s * 1000))
        options = f"-c statement_timeout={ms} -c lock_timeout={ms}"
        if readonly:
            options += " -c default_transaction_read_only=on"
        try:
            self._db = psycopg.connect(url, connect_timeout=max(1, round(timeout_s)), options=options, autocommit=True)
            if not readonly:
                with self._db.transaction():
                    self._db.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEMA_LOCK])
                    for statement in filter(str.strip, SCHEMA.split(";")):
                        self._db.execute(statement)
        except psycopg.Error as exc:
            raise _store_error(exc) from exc

    # ------------------------------------------------------------------ writing

    def write(
        self, sightings: list[tuple[Sighting, StoredEvidence]], updates: list[IdentityLearned],
        states: list[CameraStateRecord],
    ) -> WriteOutcome:
        """One transaction, as :meth:`SqliteHistory.write`. Raises StoreFull (``disk_full`` on the server),
        StoreDown (unreachable, timed out)."""
        now_ms = time.time() * 1000.0
        try:
            with self._db.transaction(), self._db.cursor() as cur:
                refs = [s.ref for s, _ in sightings]
                stored = {row[0] for row in cur.execute("SELECT ref FROM sightings WHERE ref = ANY(%s)", [refs])}
                fresh, duplicates = [], []
                for sighting, evidence in sightings:
                    (duplicates.append(sighting) if sighting.ref in stored else fresh.append((sighting, evidence)))
                    stored.add(sighting.ref)
                rows = [sighting_row(s, ev) for s, ev in fresh]
                _many(cur, INSERT, rows)
                _many(cur, "INSERT INTO merges VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                      [merge for s, _ in fresh for merge in merge_rows(s, now_ms)])
                _many(cur, "UPDATE sightings SET identity = COALESCE(%s, identity), text = COALESCE(%s, text) "
                      "WHERE ref = %s", [(u.identity, u.text, u.event_id) for u in updates])
                _many(cur, "INSERT INTO camera_states (edge, camera, wall_ts_ms, source, state, reason) "
                      "VALUES (%s, %s, %s, %s, %s, %s)",
                      [(s.edge, s.camera, s.wall_ts_ms, s.source, s.state, s.reason) for s in states])
                usage = usage_of(rows)
                if usage:
                    cur.execute(ADD_USAGE, [list(column) for column in zip(*usage)])
        except psycopg.Error as exc:
            raise _store_error(exc) from exc
        return WriteOutcome(len(fresh), duplicates)

    # ------------------------------------------------------------------ retention

    def evict_older(self, cutoff_ms: float, camera: str | None, limit: int) -> list[Evicted]:
        where, params = ("camera = %s AND ", [camera]) if camera is not None else ("", [])
        chosen = (f"SELECT id FROM sightings WHERE {where}capture_unix_ms < %s ORDER BY capture_unix_ms LIMIT %s")
        evicted = self._evict(chosen, [*params, cutoff_ms, limit])
        self._run(f"DELETE FROM camera_states WHERE {where}wall_ts_ms < %s", [*params, cutoff_ms])
        return evicted

    def evict_over(self, max_bytes: int, camera: str | None, limit: int) -> list[Evicted]:
        held = sum(b for cam, (_, b) in self.usage().items() if camera is None or cam == camera)
        if held <= max_bytes:
            return []
        where, params = ("WHERE camera = %s ", [camera]) if camera is not None else ("", [])
        chosen = (
            "SELECT id FROM (SELECT id, SUM(bytes) OVER (ORDER BY capture_unix_ms, id) - bytes AS before "
            f"FROM (SELECT id, bytes, capture_unix_ms FROM sightings {where}ORDER BY capture_unix_ms, id LIMIT %s) "
            "AS oldest) AS running WHERE before < %s"
        )
        return self._evict(chosen, [*params, limit, held - max_bytes])

    def _evict(self, chosen: str, params: list) -> list[Evicted]:
        try:
            with self._db.transaction(), self._db.cursor() as cur:
                rows = cur.execute(
                    f"DELETE FROM sightings WHERE id IN ({chosen}) RETURNING {EVICTED_COLUMNS}", params
                ).fetchall()
                freed: dict[str, list[int]] = {}
                for cam, _, size, _, _ in rows:
                    counted = freed.setdefault(cam, [0, 0])
                    counted[0] += 1
                    counted[1] += size
                _many(cur, "UPDATE usage SET rows = rows - %s, bytes = bytes - %s WHERE camera = %s",
                      [(n, size, cam) for cam, (n, size) in freed.items()])
        except psycopg.Error as exc:
            raise _store_error(exc) from exc
        return [Evicted(cam, kind, size, tuple(p for p in (crop, frame) if p)) for cam, kind, size, crop, frame in rows]

    def _run(self, sql: str, params: list) -> list[tuple]:
        try:
            cur = self._db.execute(sql, params)
            return cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            raise _store_error(exc) from exc

    def usage(self) -> dict[str, tuple[int, int]]:
        return {cam: (rows, size) for cam, rows, size in self._run("SELECT camera, rows, bytes FROM usage", [])}

    # ------------------------------------------------------------------ queries

    def cameras(self) -> set[str]:
        return {row[0] for row in self._run("SELECT camera FROM usage UNION SELECT camera FROM camera_states", [])}

    def followed_identities(self, identity: int) -> list[tuple[int, str]]:
        found = {(identity, "")}
        frontier = [identity]
        for _ in range(MAX_MERGE_HOPS):
            if not frontier:
                break
            rows = self._run("SELECT merged_id, worker FROM merges WHERE into_id = ANY(%s)", [frontier])
            new = [(m, w) for m, w in rows if (m, w) not in found]
            found.update(new)
            frontier = [m for m, w in new if not w]
        return sorted(found)

    def query(self, query: HistoryQuery) -> list[dict[str, Any]]:
        identities = None if query.identity is None else self.followed_identities(query.identity)
        sql = sightings_sql(query, identities)
        rows = [dict(zip(COLUMNS, row)) for row in self._run(sql.with_style("%s"), sql.params)]
        followed = [] if identities is None else [i for i, _ in identities]
        for row in rows:
            row["followed"] = followed
        return rows[::-1]

    def camera_states(self, camera: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        where, params = ("WHERE camera = %s ", [camera]) if camera else ("", [])
        rows = self._run(f"SELECT edge, camera, wall_ts_ms, source, state, reason FROM camera_states {where}"
                         "ORDER BY wall_ts_ms DESC LIMIT %s", [*params, limit])
        keys = ("edge", "camera", "wall_ts_ms", "source", "state", "reason")
        return [dict(zip(keys, row)) for row in rows][::-1]

    def close(self) -> None:
        self._db.close()


def _many(cur: psycopg.Cursor, sql: str, rows: list) -> None:
    if rows:
        cur.executemany(sql, rows)


def _store_error(exc: psycopg.Error) -> StoreDown:
    """A full disk on the server becomes :class:`StoreFull`, anything else :class:`StoreDown`; the message is
    redacted (:func:`vcascade.core.redact.redact`) and on one line."""
    text = " ".join(redact(str(exc)).split())  # libpq's messages span lines; a log line or a CLI error is one
    if isinstance(exc, errors.DiskFull):
        return StoreFull(f"history store full: {text}")
    return StoreDown(f"history store: {text}")

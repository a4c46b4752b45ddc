"""tools/bench_history.py in its ``--quick`` form: the run ends, its report has every part, and its ratio is the
quotient of its two rates (the figures are in docs/BENCHMARKS.md); its ``--fill`` form at a small N, on SQLite and
a real PostgreSQL server; and the bulk fill (tools/history_rows.py) leaves the very tables, indexes, merges and
usage the store writes for the same rows."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.postgres_server import PostgresServer
from tools.history_rows import fill_postgres, fill_sqlite, sightings
from vcascade.edge.history.postgres_store import PostgresHistory
from vcascade.edge.history.sqlite_store import DATABASE_FILE, SqliteHistory
from vcascade.edge.history.store import StoredEvidence

REPO = Path(__file__).resolve().parents[2]


def test_bench_history_quick_reports_write_ratio_query_latency_and_disk(tmp_path):
    out = tmp_path / "history.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench_history", "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    write = res["write"]
    assert res["rows"] == 20_000
    assert write["ratio"] == pytest.approx(write["ours_rows_per_s"] / write["bare_rows_per_s"])
    assert set(res["queries"]) == {"identity_timeline", "camera_hour", "event_line_day"}
    for lat in res["queries"].values():
        assert 0 < lat["p50_ms"] <= lat["p95_ms"]
    disk = res["disk_per_1000_results_with_evidence"]
    assert disk["image_bytes"] > 0 and disk["total_bytes"] == pytest.approx(disk["image_bytes"] + disk["database_bytes"])
    assert "x bare (goal >= 0.8)" in proc.stdout and "disk per 1,000 results with evidence" in proc.stdout


FILL_ROWS = 3_000


@pytest.fixture(scope="module")
def postgres():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = PostgresServer(port).start()
    yield server
    server.remove()


def write_through_store(store, rows: int) -> None:
    made = sightings(rows)
    for start in range(0, rows, 500):
        store.write([(s, StoredEvidence()) for s in made[start:start + 500]], [], [])


def sqlite_contents(folder: Path) -> dict[str, list]:
    db = sqlite3.connect(folder / DATABASE_FILE)
    contents = {
        "sightings": db.execute("SELECT * FROM sightings ORDER BY id").fetchall(),
        "merges": db.execute("SELECT merged_id, worker, into_id FROM merges ORDER BY 1, 2, 3").fetchall(),
        "usage": db.execute("SELECT * FROM usage ORDER BY camera").fetchall(),
        "schema": db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall(),
    }
    db.close()
    return contents


def test_sqlite_bulk_fill_leaves_what_the_store_writes(tmp_path):
    fill = fill_sqlite(tmp_path / "fill", FILL_ROWS)
    assert (fill["rows"], fill["results"], fill["events"]) == (FILL_ROWS, FILL_ROWS * 9 // 10, FILL_ROWS // 10)
    store = SqliteHistory(tmp_path / "store")
    write_through_store(store, FILL_ROWS)
    store.close()
    filled, written = sqlite_contents(tmp_path / "fill"), sqlite_contents(tmp_path / "store")
    assert len(written["sightings"]) == FILL_ROWS and written["merges"] and len(written["usage"]) == 16
    assert filled == written


def postgres_contents(url: str) -> dict[str, list]:
    with psycopg.connect(url) as db:
        return {
            "sightings": db.execute("SELECT * FROM sightings ORDER BY id").fetchall(),
            "merges": db.execute("SELECT merged_id, worker, into_id FROM merges ORDER BY 1, 2, 3").fetchall(),
            "usage": db.execute("SELECT * FROM usage ORDER BY camera").fetchall(),
            "indexes": db.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                                  "ORDER BY indexname").fetchall(),
        }


def test_postgres_bulk_fill_leaves_what_the_store_writes(postgres):
    fill = fill_postgres(postgres.url, FILL_ROWS)
    assert (fill["results"], fill["events"]) == (FILL_ROWS * 9 // 10, FILL_ROWS // 10)
    filled = postgres_contents(postgres.url)
    with psycopg.connect(postgres.url, autocommit=True) as db:
        db.execute("DROP TABLE sightings, camera_states, merges, usage")
    store = PostgresHistory(postgres.url, timeout_s=30.0)
    write_through_store(store, FILL_ROWS)
    store.close()
    written = postgres_contents(postgres.url)
    assert len(written["sightings"]) == FILL_ROWS and written["merges"] and len(written["indexes"]) >= 9
    assert filled == written


def test_bench_history_fill_reports_the_bulk_fill_and_query_latency_on_both_databases(tmp_path, postgres):
    out = tmp_path / "fill.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench_history", "--fill", "--rows", "5000", "--queries", "10",
                           "--postgres", postgres.url, "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["rows"] == 5000 and "write" not in res and "disk_per_1000_results_with_evidence" not in res
    for part in (res, res["postgres"]):
        assert (part["fill"]["results"], part["fill"]["events"]) == (4500, 500)
        assert part["database_bytes"] > 0
        assert set(part["queries"]) == {"identity_timeline", "camera_hour", "event_line_day"}
        for lat in part["queries"].values():
            assert 0 < lat["p50_ms"] <= lat["p95_ms"]
    assert proc.stdout.count("BULK FILL (not the store's write path): 5,000 rows") == 2

"""The history store on a real PostgreSQL server (Debian package ``postgresql``, started on a free port): the
writer's books balance with the server up and stopped mid-run, merges are followed, retention evicts the oldest
first, and ``vcascade search FILE`` reads the server an edge of the file names."""

from __future__ import annotations

import json
import socket
import time

import psycopg
import pytest
import yaml

from tests.demo import demo_data
from tests.edge.history.test_writer import balanced, books, sample
from tests.edge.history.way_back_events import answered, crop_jpeg, raised, state_changed, video_frames
from tests.postgres_server import PostgresServer
from tests.waiting import until
from vcascade.app.cli import main
from vcascade.core.schema.history import HistoryConfig
from vcascade.core.state_dir import state_path
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.postgres_store import PostgresHistory
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.writer import HistoryWriter, store_opener


@pytest.fixture(scope="module")
def server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pg = PostgresServer(port).start()
    yield pg
    pg.remove()


@pytest.fixture
def pg(server) -> PostgresServer:
    """The server, running, with empty tables."""
    if server.proc is None:
        server.start()
    with psycopg.connect(server.url, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)}")
    return server


def cfg_for(pg: PostgresServer, **overrides) -> HistoryConfig:
    return HistoryConfig(store={"type": "postgres", "url": pg.url}, retention_interval_s=3600, timeout_s=1.0,
                         **overrides)


def test_books_balance_and_merges_are_followed(pg, bikes_path):
    cfg = cfg_for(pg)
    folder = state_path(cfg.path)
    w = HistoryWriter("edge-pg1", cfg, {}, store_opener(cfg), EvidenceFolder(folder)).start()
    crop = crop_jpeg(video_frames(bikes_path, 1)[0])
    for item in (state_changed(), answered(identity=9, crop=crop), answered(identity=7, merged_from=(9,), crop=crop),
                 raised(identity=7), answered(identity=-3, worker="worker-1"),
                 answered(identity=7, merged_from=(-3,), worker="worker-1")):
        w.keep(item)
    w.close(20.0)
    assert balanced("edge-pg1") and books("edge-pg1", "cam-a", "result") == (4, 4, 0)
    store = PostgresHistory(pg.url, readonly=True)
    rows = store.query(HistoryQuery(identity=7))
    assert [r["identity"] for r in rows] == [9, 7, 7, -3, 7] and rows[0]["followed"] == [-3, 7, 9]
    assert (folder / rows[0]["crop_path"]).read_bytes() == crop
    assert store.camera_states("cam-a")[0]["state"] == "streaming"
    with pytest.raises(Exception):
        store._db.execute("DELETE FROM sightings")  # the search's session is read-only
    store.close()


def test_a_server_stopped_mid_run_drops_and_counts_then_recovers(pg):
    cfg = cfg_for(pg, batch_max=10)
    w = HistoryWriter("edge-pg2", cfg, {}, store_opener(cfg), None).start()
    for _ in range(20):
        w.keep(answered(identity=1))
    assert until(lambda: books("edge-pg2", "cam-a", "result")[1] == 20, 60)
    pg.stop()
    started = time.perf_counter()
    for _ in range(40):
        w.keep(answered(identity=1))
    assert time.perf_counter() - started < 2.0  # keep() never waits for the server
    assert until(lambda: sample("vcascade_history_dropped_total", edge="edge-pg2", camera="cam-a", kind="result",
                                reason="store_error") > 0, 60)
    assert sample("vcascade_history_store_up", edge="edge-pg2") == 0
    pg.start()
    assert until(lambda: w._queue.qsize() == 0, 60)
    for _ in range(5):
        w.keep(answered(identity=1))
    assert until(lambda: sample("vcascade_history_store_up", edge="edge-pg2") == 1, 60)
    w.close(20.0)
    received, stored, dropped = books("edge-pg2", "cam-a", "result")
    assert received == 65 and stored + dropped == 65 and dropped > 0
    store = PostgresHistory(pg.url, readonly=True)
    assert len(store.query(HistoryQuery(limit=1000))) == stored
    store.close()


def test_retention_evicts_the_oldest_first(pg):
    store = PostgresHistory(pg.url)
    cfg = cfg_for(pg)
    w = HistoryWriter("edge-pg3", cfg, {}, store_opener(cfg), None).start()
    now_ms = time.time() * 1000.0
    for n in range(10):
        w.keep(answered(camera="cam-r", identity=n, capture_unix_ms=now_ms - (10 - n) * 86_400_000.0))
    w.close(20.0)
    assert [e.kind for e in store.evict_older(now_ms - 5.5 * 86_400_000.0, "cam-r", 100)] == ["result"] * 5
    assert store.usage()["cam-r"] == (5, 5 * 256)
    evicted = store.evict_over(3 * 256, None, 100)
    assert len(evicted) == 2 and store.usage()["cam-r"] == (3, 3 * 256)
    assert [r["identity"] for r in store.query(HistoryQuery())] == [7, 8, 9]
    store.close()


def test_search_reads_the_server_the_file_names(pg, tmp_path, capsys):
    cfg = cfg_for(pg)
    w = HistoryWriter("edge-pg4", cfg, {}, store_opener(cfg), None).start()
    w.keep(answered(camera="street-1", identity=21))
    w.keep(answered(camera="street-2", identity=21))
    w.close(20.0)
    data = demo_data()
    data["edges"]["edge-1"]["history"] = {"store": {"type": "postgres", "url": pg.url}}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["search", str(path), "--identity", "21", "--json"]) == 0
    assert [r["camera"] for r in json.loads(capsys.readouterr().out)] == ["street-1", "street-2"]
    pg.stop()
    assert main(["search", str(path), "--identity", "21"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vcascade search: postgresql://") and "history store:" in err and err.count("\n") == 1

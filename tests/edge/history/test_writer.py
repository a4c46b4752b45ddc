"""The history writer on a real SQLite store and real files: records and evidence written on its own thread, the
books balance (records = stored + counted drops) with the store up, locked mid-run by another process, and full
(a size-limited tmpfs when this test may mount one, and SQLite's ``max_page_count``), files private.

Metrics checked here: vcascade_history_records_total, vcascade_history_stored_total,
vcascade_history_dropped_total, vcascade_history_evidence_images_total, vcascade_history_evidence_dropped_total,
vcascade_history_queue_depth, vcascade_history_store_up, vcascade_history_evicted_total,
vcascade_history_evicted_bytes_total.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from tests.edge.history.way_back_events import (
    answered, crop_jpeg, picture, raised, state_changed, updated, video_frames,
)
from tests.waiting import until
from vcascade.core.schema.history import HistoryConfig, HistoryLimits
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.metrics import DROP_REASONS
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.records import KINDS
from vcascade.edge.history.sqlite_store import DATABASE_FILE, SqliteHistory
from vcascade.edge.history.writer import HistoryWriter

_edges = itertools.count(1)


@pytest.fixture(scope="module")
def frames(bikes_path) -> list[np.ndarray]:
    return video_frames(bikes_path, 4)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def books(edge: str, camera: str, kind: str) -> tuple[float, float, float]:
    """(received, stored, dropped) of one edge, camera and kind."""
    received = sample("vcascade_history_records_total", edge=edge, camera=camera, kind=kind)
    stored = sample("vcascade_history_stored_total", edge=edge, camera=camera, kind=kind)
    dropped = sum(sample("vcascade_history_dropped_total", edge=edge, camera=camera, kind=kind, reason=r)
                  for r in DROP_REASONS)
    return received, stored, dropped


def balanced(edge: str, cameras=("cam-a",)) -> bool:
    return all(r == s + d for cam in cameras for kind in KINDS for r, s, d in [books(edge, cam, kind)])


def writer(folder: Path, evidence: bool = True, **overrides) -> HistoryWriter:
    edge = f"edge-h{next(_edges)}"
    cfg = HistoryConfig(**{"queue_max": 10_000, "retention_interval_s": 3600, "timeout_s": 0.2, **overrides})
    store = lambda: SqliteHistory(folder, cfg.timeout_s)  # noqa: E731
    return HistoryWriter(edge, cfg, {}, store, EvidenceFolder(folder) if evidence else None).start()


def rows(folder: Path, **query) -> list[dict]:
    store = SqliteHistory(folder, readonly=True)
    try:
        return store.query(HistoryQuery(limit=100_000, **query))
    finally:
        store.close()


def test_results_events_and_states_are_stored_with_private_evidence(tmp_path, frames):
    folder = tmp_path / "history"
    w = writer(folder)
    crop = crop_jpeg(frames[0])
    event = raised(frame=picture(frames[1]))
    for item in (state_changed(), answered(identity=7, crop=crop), answered(identity=None, text="AB123", crop=crop),
                 answered(identity=None, text="", crop=crop), event, updated(event, 7)):
        w.keep(item)
    assert until(lambda: sample("vcascade_history_stored_total", edge=w.edge, camera="cam-a", kind="event_update") == 1)
    w.close(5.0)
    found = rows(folder)
    assert [(r["kind"], r["identity"], r["text"]) for r in found] == [  # oldest first: the event was raised first
        ("event", 7, None), ("result", 7, None), ("result", None, "AB123"), ("result", None, "")]
    with_crop = [r for r in found if r["crop_path"]]
    assert len(with_crop) == 3  # an identity, a text reading, an event; not an empty reading
    assert (folder / found[1]["crop_path"]).read_bytes() == crop  # the JPEG the edge sent, as it was
    assert found[0]["frame_path"] and (folder / found[0]["frame_path"]).read_bytes()[:2] == b"\xff\xd8"
    assert sample("vcascade_history_evidence_images_total", edge=w.edge, camera="cam-a", image="crop") == 3
    assert sample("vcascade_history_evidence_images_total", edge=w.edge, camera="cam-a", image="frame") == 1
    for path in [folder / DATABASE_FILE, *(folder / r["crop_path"] for r in with_crop)]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in [folder, (folder / found[0]["crop_path"]).parent]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    states = SqliteHistory(folder, readonly=True).camera_states("cam-a")
    assert [(s["source"], s["state"], s["reason"]) for s in states] == [("connecting", "streaming", "opened")]
    assert balanced(w.edge)
    assert sample("vcascade_history_store_up", edge=w.edge) == 1
    assert sample("vcascade_history_queue_depth", edge=w.edge) == 0
    assert w.stats() == {"stored": {"camera_state": 1, "result": 3, "event": 1, "event_update": 1}, "dropped": {},
                         "queued": 0}  # the edge's snapshot and the run summary show these


def test_a_full_queue_drops_and_counts_without_blocking(tmp_path):
    w = writer(tmp_path / "history", evidence=False, queue_max=10, batch_max=1)
    started = time.perf_counter()
    for _ in range(2000):
        w.keep(answered(identity=1))
    assert time.perf_counter() - started < 5.0  # never waits for the store (generous: a loaded 2-core machine)
    w.close(10.0)
    received, stored, dropped = books(w.edge, "cam-a", "result")
    assert received == 2000 and stored >= 1
    assert sample("vcascade_history_dropped_total", edge=w.edge, camera="cam-a", kind="result", reason="queue_full") > 0
    assert received == stored + dropped
    assert len(rows(tmp_path / "history")) == stored
    assert sum(w.stats()["dropped"].values()) == dropped


LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def test_a_store_locked_mid_run_drops_and_counts_then_recovers(tmp_path, frames):
    folder = tmp_path / "history"
    w = writer(folder, batch_max=20)
    crop = crop_jpeg(frames[0])
    for _ in range(30):
        w.keep(answered(identity=2, crop=crop))
    assert until(lambda: sample("vcascade_history_stored_total", edge=w.edge, camera="cam-a", kind="result") == 30)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(folder / DATABASE_FILE)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        for _ in range(30):
            w.keep(answered(identity=2, crop=crop))
            w.keep(raised())
        assert until(lambda: sample("vcascade_history_dropped_total", edge=w.edge, camera="cam-a", kind="result",
                                    reason="store_error") > 0)
        assert sample("vcascade_history_store_up", edge=w.edge) == 0
    finally:
        locker.stdin.write("\n")
        locker.stdin.close()
        locker.wait(30)
    assert until(lambda: w._queue.qsize() == 0)
    for _ in range(10):
        w.keep(answered(identity=2, crop=crop))
    assert until(lambda: sample("vcascade_history_store_up", edge=w.edge) == 1)
    w.close(10.0)
    assert balanced(w.edge)
    stored = books(w.edge, "cam-a", "result")[1] + books(w.edge, "cam-a", "event")[1]
    found = rows(folder)
    assert len(found) == stored
    # the images of dropped rows were removed and counted; those of stored rows are all there
    on_disk = sorted(str(p.relative_to(folder)) for p in (folder / "evidence").rglob("*.jpg"))
    assert on_disk == sorted(r["crop_path"] for r in found if r["crop_path"])
    assert sample("vcascade_history_evidence_dropped_total", edge=w.edge, camera="cam-a", image="crop",
                  reason="store_error") > 0


def test_a_full_database_drops_and_counts(tmp_path, frames):
    """SQLite's max_page_count makes the database full (SQLITE_FULL) while the disk is not: the rows are counted
    as disk_full, and the edge goes on."""
    folder = tmp_path / "history"
    SqliteHistory(folder).close()
    db = sqlite3.connect(folder / DATABASE_FILE)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()

    class Capped(SqliteHistory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._db.execute(f"PRAGMA max_page_count={pages + 2}")

    cfg = HistoryConfig(queue_max=10_000, retention_interval_s=3600, batch_max=50)
    w = HistoryWriter("edge-full-db", cfg, {}, lambda: Capped(folder), EvidenceFolder(folder)).start()
    crop = crop_jpeg(frames[0])
    for _ in range(400):
        w.keep(answered(identity=3, crop=crop, camera="cam-a"))
    w.close(20.0)
    assert sample("vcascade_history_dropped_total", edge="edge-full-db", camera="cam-a", kind="result",
                  reason="disk_full") > 0
    assert balanced("edge-full-db")
    assert len(rows(folder)) == books("edge-full-db", "cam-a", "result")[1]


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    """A 2 MiB tmpfs (root only: the test is skipped where mounting is not allowed, the max_page_count test above
    still runs)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_drops_and_counts_and_the_books_balance(tiny_disk, frames):
    folder = tiny_disk / "history"
    w = writer(folder, batch_max=20)
    crops = [crop_jpeg(f, (0, 0, 640, 272)) for f in frames]  # whole frames: the disk fills fast
    for n in range(600):
        w.keep(answered(identity=4, crop=crops[n % len(crops)]))
        w.keep(raised())
    w.close(30.0)
    reasons = {r: sample("vcascade_history_evidence_dropped_total", edge=w.edge, camera="cam-a", image="crop",
                         reason=r) for r in DROP_REASONS}
    rows_dropped = sample("vcascade_history_dropped_total", edge=w.edge, camera="cam-a", kind="result",
                          reason="disk_full")
    assert reasons["disk_full"] > 0 or rows_dropped > 0
    assert balanced(w.edge)
    os.sync()
    found = rows(folder)
    assert len(found) == books(w.edge, "cam-a", "result")[1] + books(w.edge, "cam-a", "event")[1]
    for row in found:  # every row's evidence path names a whole file
        if row["crop_path"]:
            assert (folder / row["crop_path"]).stat().st_size > 0


def test_a_store_that_cannot_open_counts_every_record(tmp_path):
    blocker = tmp_path / "history"
    blocker.write_text("a file where the folder should be")
    w = writer(blocker, evidence=False)
    for _ in range(50):
        w.keep(answered(identity=5))
        w.keep(state_changed())
    w.close(5.0)
    assert books(w.edge, "cam-a", "result") == (50, 0, 50)
    assert books(w.edge, "cam-a", "camera_state") == (50, 0, 50)


def test_retention_evicts_the_oldest_first_and_counts(tmp_path, frames):
    folder = tmp_path / "history"
    now_s = time.time()
    cfg = HistoryConfig(retention_interval_s=3600, max_days=2.0, max_bytes=None)
    clock_s = [now_s]
    w = HistoryWriter("edge-retain", cfg, {"cam-b": HistoryLimits(max_bytes=1_000_000)},
                      lambda: SqliteHistory(folder), EvidenceFolder(folder), clock=lambda: clock_s[0])
    big = crop_jpeg(frames[0], (0, 0, 640, 272))
    day_ms = 86_400_000.0
    for age_days in (5, 3, 1, 0):  # two rows older than max_days on cam-a
        w.keep(answered(camera="cam-a", identity=1, crop=big, capture_unix_ms=now_s * 1000 - age_days * day_ms))
    per_row = len(big) + 256
    over = 1_000_000 // per_row + 5
    for n in range(over):  # cam-b: more bytes than its own limit, one minute apart, oldest first
        w.keep(answered(camera="cam-b", identity=2, crop=big, capture_unix_ms=now_s * 1000 - (over - n) * 60_000))
    w.start()
    assert until(lambda: sample("vcascade_history_stored_total", edge="edge-retain", camera="cam-b", kind="result")
                 == over, 60)
    clock_s[0] += 3600  # the next check is due
    assert until(lambda: sample("vcascade_history_evicted_total", edge="edge-retain", camera="cam-b",
                                kind="result", limit="bytes") > 0, 60)
    w.close(10.0)
    cam_a = rows(folder, cameras=("cam-a",))
    assert [round((now_s * 1000 - r["capture_unix_ms"]) / day_ms) for r in cam_a] == [1, 0]
    assert sample("vcascade_history_evicted_total", edge="edge-retain", camera="cam-a", kind="result",
                  limit="days") == 2
    cam_b = rows(folder, cameras=("cam-b",))
    kept_bytes = sum(r["bytes"] for r in cam_b)
    assert kept_bytes <= 1_000_000 < kept_bytes + per_row
    evicted_b = sample("vcascade_history_evicted_total", edge="edge-retain", camera="cam-b", kind="result",
                       limit="bytes")
    assert evicted_b == over - len(cam_b)
    oldest_kept = min(r["capture_unix_ms"] for r in cam_b)
    assert oldest_kept == max(r["capture_unix_ms"] for r in cam_b) - (len(cam_b) - 1) * 60_000  # the newest kept
    assert sample("vcascade_history_evicted_bytes_total", edge="edge-retain", camera="cam-b") == evicted_b * per_row
    on_disk = list((folder / "evidence" / "cam-b").rglob("*.jpg"))
    assert len(on_disk) == len(cam_b)  # evicted rows' files are gone


def test_images_waiting_are_bounded_in_bytes_and_the_rows_still_go(tmp_path, frames):
    """The queue holds at most queue_images_max_bytes of images: a record past it is queued without them."""
    folder = tmp_path / "history"
    cfg = HistoryConfig(queue_max=10_000, retention_interval_s=3600, queue_images_max_bytes=1_000_000)
    w = HistoryWriter("edge-held", cfg, {}, lambda: SqliteHistory(folder), EvidenceFolder(folder))
    crop = crop_jpeg(frames[0], (0, 0, 640, 272))
    fit = 1_000_000 // len(crop)
    for _ in range(fit + 20):  # the writer is not started yet: everything waits in the queue
        w.keep(answered(identity=8, crop=crop))
    assert sample("vcascade_history_evidence_dropped_total", edge="edge-held", camera="cam-a", image="crop",
                  reason="queue_full") == 20
    w.start().close(20.0)
    assert books("edge-held", "cam-a", "result") == (fit + 20, fit + 20, 0)  # every row stored
    assert sample("vcascade_history_evidence_images_total", edge="edge-held", camera="cam-a", image="crop") == fit
    assert len(list((folder / "evidence").rglob("*.jpg"))) == fit
    assert w._held_bytes == 0

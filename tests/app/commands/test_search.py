"""``vcascade search`` over a real history store written by the history writer: identity timelines follow merges
(store duplicates and reconciled provisional ids), filters, JSON, saved evidence, and bad queries as one line
with exit 2."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.edge.history.way_back_events import answered, crop_jpeg, raised, video_frames
from vcascade.app.cli import main
from vcascade.core.schema.history import HistoryConfig
from vcascade.core.state_dir import state_path
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory
from vcascade.edge.history.writer import HistoryWriter

REPO = Path(__file__).resolve().parents[3]
HOUR_MS = 3_600_000.0


@pytest.fixture
def store(bikes_path) -> Path:
    """The default history folder of the state folder, with: identity 7 on cam-a and cam-b, identity 9 (merged into
    7 later), a provisional id -2 of worker-1 (reconciled into 7) and the same number from worker-2 (not), an
    identity 11 elsewhere, a plate reading and line and zone events."""
    folder = state_path("history")
    crop = crop_jpeg(video_frames(bikes_path, 1)[0])
    now = time.time() * 1000.0
    cfg = HistoryConfig(retention_interval_s=3600)
    writer = HistoryWriter("edge-s", cfg, {}, lambda: SqliteHistory(folder), EvidenceFolder(folder)).start()
    events = [
        answered("cam-a", 7, crop=crop, capture_unix_ms=now - 5 * HOUR_MS),
        answered("cam-b", 9, crop=crop, capture_unix_ms=now - 4 * HOUR_MS),
        answered("cam-a", -2, crop=crop, capture_unix_ms=now - 3.5 * HOUR_MS, worker="worker-1"),
        answered("cam-a", -2, crop=crop, capture_unix_ms=now - 3.4 * HOUR_MS, worker="worker-2"),
        answered("cam-b", 7, crop=crop, capture_unix_ms=now - 3 * HOUR_MS, merged_from=(9,)),
        answered("cam-a", 7, crop=crop, capture_unix_ms=now - 2 * HOUR_MS, merged_from=(-2,), worker="worker-1"),
        answered("cam-a", 11, crop=crop, capture_unix_ms=now - 1.5 * HOUR_MS),
        answered("cam-b", None, text="KA-01-AB-1234", crop=crop, capture_unix_ms=now - 0.5 * HOUR_MS),
        raised("cam-a", "line_cross", "door", identity=7, capture_unix_ms=now - 0.4 * HOUR_MS),
        raised("cam-b", "zone_enter", "yard", identity=11, capture_unix_ms=now - 0.3 * HOUR_MS),
    ]
    for event in events:
        writer.keep(event)
    writer.close(10.0)
    assert len(SqliteHistory(folder, readonly=True).query(HistoryQuery(limit=100))) == len(events)
    return folder


def search_json(capsys, *args: str) -> list[dict]:
    assert main(["search", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_identity_timeline_follows_its_merges(store, capsys):
    rows = search_json(capsys, "--identity", "7")
    assert [(r["camera"], r["identity"], r["worker"]) for r in rows] == [
        ("cam-a", 7, "worker-1"), ("cam-b", 9, "worker-1"), ("cam-a", -2, "worker-1"), ("cam-b", 7, "worker-1"),
        ("cam-a", 7, "worker-1"), ("cam-a", 7, "")]  # the event of identity 7 last; worker-2's -2 is another object
    assert rows[0]["merged_from"] == [-2, 9]
    assert all(Path(r["crop_file"]).read_bytes()[:2] == b"\xff\xd8" for r in rows if r["kind"] == "result")
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)


def test_filters(store, capsys):
    assert [r["text"] for r in search_json(capsys, "--text", "ab-12")] == ["KA-01-AB-1234"]
    assert [r["identity"] for r in search_json(capsys, "--camera", "cam-b", "--since", "2h")] == [None, 11]
    assert [r["place"] for r in search_json(capsys, "--event", "line_cross")] == ["door"]
    assert [r["place"] for r in search_json(capsys, "--zone", "yard")] == ["yard"]
    assert search_json(capsys, "--line", "yard") == []
    assert len(search_json(capsys, "--limit", "3")) == 3
    frm = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3.2 * 3600))
    to = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1.8 * 3600))
    assert [r["identity"] for r in search_json(capsys, "--from", frm, "--to", to)] == [7, 7]
    assert [r["identity"] for r in search_json(capsys, "--class", "person", "--identity", "11")] == [11, 11]


def test_the_table_shows_the_timeline_and_its_evidence(store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["search", "--identity", "7"]) == 0
    out = capsys.readouterr().out
    assert "identity 7 (merged from -2, 9)" in out
    assert "line_cross door in" in out and "cam-b" in out and ".jpg" in out


def test_save_writes_private_evidence_images(store, tmp_path, capsys):
    target = tmp_path / "saved"
    assert main(["search", "--identity", "7", "--save", str(target), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    files = sorted(target.iterdir())
    assert len(files) == sum(1 for r in rows if r["crop_file"])
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes()[:2] == b"\xff\xd8"


@pytest.mark.parametrize("args, problem", [
    (["--since", "yesterday"], "--since 'yesterday': expected a positive number and a unit"),
    (["--from", "3 dec"], "--from '3 dec': expected an ISO 8601 time"),
    (["--camera", "cam-z"], "--camera 'cam-z': no such camera in the history (known: cam-a, cam-b)"),
    (["--event", "explosion"], "--event 'explosion': expected one of line_cross, zone_enter"),
    (["--line", "door", "--event", "zone_exit"], "--line with --event 'zone_exit'"),
    (["--limit", "0"], "--limit 0: expected 1..100000"),
    (["--identity", "99999999999999999999"], "--identity 99999999999999999999: expected an id within a signed 64"),
    (["--since", "1h", "--from", "2026-12-03"], "--since and --from both give the start"),
    (["--from", "2026-12-03T10:00", "--to", "2026-12-03T09:00"], "--to is not after --from"),
])
def test_bad_queries_name_the_problem_in_one_line_and_exit_2(store, capsys, args, problem):
    assert main(["search", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vcascade search: ") and problem in err and err.count("\n") == 1, err


def test_the_deployment_file_names_the_stores_and_the_cameras(store, capsys):
    rows = search_json(capsys, str(REPO / "configs" / "demo.yaml"), "--identity", "7")
    assert len(rows) == 6
    assert main(["search", str(REPO / "configs" / "demo.yaml"), "--camera", "cam-z"]) == 2
    assert "no such camera in the deployment file or its history (known: " in capsys.readouterr().err


def test_a_camera_in_the_history_but_not_in_the_file_is_searched(store, capsys):
    # cameras added at run time (`vcascade camera add`) are in no deployment file; their rows are in the store
    rows = search_json(capsys, str(REPO / "configs" / "demo.yaml"), "--camera", "cam-a")
    assert rows and {row["camera"] for row in rows} == {"cam-a"}


def test_a_search_without_like_loads_no_torch(store):
    code = ("import sys; from vcascade.app.cli import main; rc = main(['search', '--identity', '7', '--json']); "
            "print(rc, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "0 False", done.stderr


def test_no_store_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vcascade", "search", "--store", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("vcascade search: no history store in ") and done.stderr.count("\n") == 1


def test_like_checks_its_image_and_arguments_before_loading_anything(store, tmp_path, capsys):
    demo = str(REPO / "configs" / "demo.yaml")
    not_image = tmp_path / "notes.jpg"
    not_image.write_text("not a picture")
    cases = [
        ([demo, "--like", str(not_image)], f"--like '{not_image}': not an image"),
        ([demo, "--like", str(tmp_path / "missing.jpg")], "cannot read it: No such file or directory"),
        (["--like", str(not_image)], "--like needs the deployment FILE"),
        ([demo, "--like", str(not_image), "--identity", "7"], "--like and --identity both name the identity"),
    ]
    for args, problem in cases:
        assert main(["search", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("vcascade search: ") and problem in err and err.count("\n") == 1, err

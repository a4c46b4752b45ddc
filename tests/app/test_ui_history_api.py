"""The history over the live view's HTTP server (issue 29, item 4): ``vcascade search``'s queries as JSON over a
real store written by the history writer with real JPEG evidence, behind the view's token; bounded (limit,
offset, the query's time budget); bad parameters a 400 of one line naming the parameter; evidence served by row
id only, never from a path outside the history folder; every answer and refusal counted."""

from __future__ import annotations

import json
import logging
import sqlite3
import urllib.error
import urllib.request

import pytest
import yaml

from tests.app.ui_history import EVENTS, history_view
from tests.demo import demo_data
from tests.edge.history.way_back_events import answered, crop_jpeg, video_frames
from tests.postgres_server import PostgresServer
from vcascade.app.ui import history_api
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
from vcascade.core.state_dir import state_path
from vcascade.edge.history import sqlite_store
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.sqlite_store import DATABASE_FILE
from vcascade.edge.history.writer import HistoryWriter, store_opener

TOKEN = "history-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def view(tmp_path, free_port, bikes_path):
    """(view URL, history) for the demo deployment (no component running) whose edge's history is filled."""
    with history_view(tmp_path, free_port(), bikes_path, TOKEN) as (url, history, _):
        yield url, history


def get(url: str, headers: dict[str, str] | None = BEARER):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, answer.read(), answer.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def search(view: str, query: str) -> dict:
    status, body, _ = get(f"{view}/api/history/search?{query}")
    assert status == 200, body
    return json.loads(body)


def test_an_identity_timeline_follows_merges_with_evidence_urls(view):
    url, _ = view
    rows = search(url, "identity=7")["rows"]
    assert [(r["camera"], r["identity"], r["kind"]) for r in rows][::-1] == [
        ("street-1", 7, "result"), ("street-2", 9, "result"), ("street-2", 7, "result"), ("street-1", 7, "result"),
        ("street-1", 7, "event")]  # newest first; id 9 was merged into 7
    assert rows[0]["merged_from"] == [9]
    assert all("crop_file" not in r and "frame_file" not in r for r in rows), "no host paths in the API"
    for row in rows:
        status, body, headers = get(f"{url}{row['crop_url']}")
        assert status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    assert rows[0]["frame_url"] and get(f"{url}{rows[0]['frame_url']}")[1][:2] == b"\xff\xd8"


def test_filters_and_pages_newest_first(view):
    url, history = view
    assert [r["text"] for r in search(url, "text=ab-12")["rows"]] == ["KA-01-AB-1234"]
    assert {r["place"] for r in search(url, "event=line_cross")["rows"]} == {"stop-line"}
    assert {r["camera"] for r in search(url, "camera=street-2&kind=event&limit=100")["rows"]} == {"street-2"}
    first = search(url, "kind=event&limit=20")
    second = search(url, "kind=event&limit=20&offset=20")
    assert first["more"] and not second["more"]
    times = [r["capture_unix_ms"] for r in first["rows"] + second["rows"]]
    assert len(times) == EVENTS and times == sorted(times, reverse=True)
    assert len({r["ref"] for r in first["rows"] + second["rows"]}) == EVENTS
    assert len(search(url, "since=1h&limit=500")["rows"]) == history.rows


@pytest.mark.parametrize("query, line", [
    ("since=yesterday", "since 'yesterday': expected a positive number and a unit"),
    ("since=--5m", "since '--5m': expected a positive number and a unit"),  # the value is quoted as given
    ("from=3+dec", "from '3 dec': expected an ISO 8601 time"),
    ("camera=street-9", "camera 'street-9': no such camera in the deployment file or its history (known: street-1, street-2)"),
    ("event=explosion", "event 'explosion': expected one of line_cross"),
    ("limit=501", "limit 501: expected 1..500"),
    ("limit=ten", "limit 'ten': expected an integer"),
    ("identity=seven", "identity 'seven': expected an integer"),
    ("identity=99999999999999999999", "identity 99999999999999999999: expected an id within a signed 64-bit"),
    ("offset=-1", "offset -1: expected 0 or more"),
    ("offset=99900&limit=500", "offset 99900: offset + limit must stay under 100000"),
    ("offset=99500&limit=500", "offset 99500: offset + limit must stay under 100000"),
    ("kind=result", "kind 'result': expected event"),
    ("color=red", "unknown parameter 'color'"),
    ("text=a&text=b", "text given 2 times: give it once"),
])
def test_a_bad_parameter_is_one_line_naming_it(view, query, line):
    status, body, _ = get(f"{view[0]}/api/history/search?{query}")
    assert status == 400
    assert line in body.decode() and body.decode().count("\n") == 1


def test_the_token_is_required(view):
    url, _ = view
    row = search(url, "identity=7")["rows"][0]
    assert get(f"{url}/api/history/search?identity=7", headers={})[0] == 401
    assert get(f"{url}{row['crop_url']}", headers={})[0] == 401
    status, body, _ = get(f"{url}/api/history/search?identity=7&token={TOKEN}", headers={})  # the gate reads it
    assert status == 200 and len(json.loads(body)["rows"]) == 5


def test_an_evidence_image_is_not_kept_in_the_browsers_cache(view):
    url, _ = view
    row = search(url, "identity=7&limit=1")["rows"][0]
    status, body, headers = get(f"{url}{row['crop_url']}")
    assert status == 200 and body[:2] == b"\xff\xd8" and headers["Cache-Control"] == "no-store"  # personal data


def test_an_evidence_image_over_the_limit_is_refused_and_counted(view, monkeypatch):
    url, _ = view
    row = search(url, "identity=7&limit=1")["rows"][0]
    monkeypatch.setattr(history_api, "MAX_EVIDENCE_BYTES", 100)
    status, body, _ = get(f"{url}{row['crop_url']}")
    assert status == 413 and body.decode() == f"the crop.jpg of {row['ref']} is over 100 bytes\n"
    assert json.loads(get(f"{url}/api/history/counts")[1])["evidence_too_large"] == 1


def test_evidence_is_found_by_id_only_and_never_outside_the_folder(view):
    url, history = view
    row = search(url, "identity=11&kind=event&limit=1")["rows"][0]
    for name in ("../../../etc/passwd", "..%2f..%2fhistory.sqlite3", "x" * 129, "a%20b"):
        assert get(f"{url}/api/history/evidence/{name}/crop.jpg")[0] == 404
    assert get(f"{url}/api/history/evidence/{row['ref']}/history.sqlite3")[0] == 404
    assert get(f"{url}/api/history/evidence/no-such-row/crop.jpg")[0] == 404
    db = sqlite3.connect(history.folder / DATABASE_FILE)
    with db:  # a path in the database that leads out of the folder is not followed
        db.execute("UPDATE sightings SET crop_path = '../../deploy.yaml' WHERE ref = ?", [row["ref"]])
    db.close()
    status, body, _ = get(f"{url}/api/history/evidence/{row['ref']}/crop.jpg")
    assert status == 404 and b"version" not in body
    counts = json.loads(get(f"{url}/api/history/counts")[1])
    assert counts["evidence_bad_name"] == 5 and counts["evidence_not_found"] == 2 and counts["search_ok"] == 1


def test_a_row_no_reader_expects_is_a_counted_500_logged_by_type_and_the_view_serves_on(view, caplog):
    url, history = view
    row = search(url, "identity=11&kind=event&limit=1")["rows"][0]
    db = sqlite3.connect(history.folder / DATABASE_FILE)
    with db:  # another writer (or a bad disk) left a capture time that is no number: no refusal foresees it
        db.execute("UPDATE sightings SET capture_unix_ms = 'alice at 12 Main St' WHERE ref = ?", [row["ref"]])
    db.close()
    with caplog.at_level(logging.ERROR, logger="vcascade.app.ui.history_api"):
        status, body, _ = get(f"{url}/api/history/search?identity=11")
    assert status == 500 and body == b"internal error: see the view's log\n"
    [line] = [r.getMessage() for r in caplog.records if r.name.startswith("vcascade")]
    assert line.startswith("history API: a search request failed: TypeError at ") and "alice" not in line
    assert get(f"{url}/api/history/search?identity=7")[0] == 200  # the server serves on
    assert json.loads(get(f"{url}/api/history/counts")[1]) == {"search_internal_error": 1, "search_ok": 2}


def test_a_query_past_its_time_budget_is_a_503_naming_it(view, monkeypatch):
    monkeypatch.setattr(history_api, "QUERY_BUDGET_S", 0.0)
    monkeypatch.setattr(sqlite_store, "PROGRESS_STEPS", 1)
    status, body, _ = get(f"{view[0]}/api/history/search?since=1h")
    assert status == 503 and b"ran past its budget of 0 s" in body
    assert json.loads(get(f"{view[0]}/api/history/counts")[1]) == {"search_store_down": 1}


def test_without_a_history_store_the_search_says_so(tmp_path, free_port):
    data = demo_data()
    data["ui"] = {"port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    server = serve_view(load_config(path))
    try:
        status, body, _ = get(f"http://127.0.0.1:{server.server_address[1]}/api/history/search", headers={})
    finally:
        server.shutdown()
    assert status == 503 and body.startswith(b"no history store in ")


def test_the_search_reads_a_postgresql_store_and_names_it_when_it_is_down(tmp_path, free_port, bikes_path):
    pg = PostgresServer(free_port()).start()
    try:
        data = demo_data()
        data["edges"]["edge-1"]["history"] = {"store": {"type": "postgres", "url": pg.url}, "timeout_s": 1.0}
        data["ui"] = {"port": free_port()}
        path = tmp_path / "deploy.yaml"
        path.write_text(yaml.safe_dump(data))
        dep = load_config(path)
        cfg, folder = dep.edges["edge-1"].history, state_path("history")
        writer = HistoryWriter("edge-1", cfg, {}, store_opener(cfg), EvidenceFolder(folder)).start()
        crop = crop_jpeg(video_frames(bikes_path, 1)[0])
        writer.keep(answered("street-1", 21, crop=crop))
        writer.keep(answered("street-2", 21, crop=crop))
        writer.close(20.0)
        server = serve_view(dep)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            rows = search(url, "identity=21")["rows"]
            assert [r["camera"] for r in rows] == ["street-2", "street-1"]
            assert get(f"{url}{rows[0]['crop_url']}", headers={})[1][:2] == b"\xff\xd8"
            pg.stop()
            status, body, _ = get(f"{url}/api/history/search?identity=21", headers={})
        finally:
            server.shutdown()
    finally:
        pg.remove()
    assert status == 503 and body.startswith(b"postgresql://") and b"history store:" in body

"""``/api/history/search?like=<row id>`` (issue 29, item 4): "find similar" over the live view's server, with the
real embedding recognizer of configs/demo.yaml and a real identity space: the crop kept with a row is embedded
(model loaded once, one embedding at a time: a concurrent like-query is a counted 503), the nearest identities'
timelines answer; a row without a crop, a deployment without an embedding recognizer, and bad parameters are
400s naming the cause, counted."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from tests.app.test_ui_history_api import get
from tests.app.ui_history import enrol_like, fill_history, history_view
from tests.demo import EMBEDDER, demo_data
from vcascade.app.like_image import load_embedder
from vcascade.app.ui import history_like
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory

TOKEN = "history-token-0123456789abcdef"


@pytest.fixture
def like_view(tmp_path, free_port, bikes_path):
    """(view URL, history, deployment) for the demo deployment (embedder on torch), its history filled."""
    with history_view(tmp_path, free_port(), bikes_path, TOKEN) as found:
        yield found


def counts(url: str) -> dict:
    return json.loads(get(f"{url}/api/history/counts")[1])


def test_like_a_rows_crop_answers_the_nearest_identities_timelines(like_view, monkeypatch):
    url, history, dep = like_view
    ref = enrol_like(dep, history)
    entered, go_on, loads = threading.Event(), threading.Event(), []

    def held_load(*args):  # the real model, loaded once the test has sent its concurrent query
        loads.append(args)
        entered.set()
        go_on.wait(60)
        return load_embedder(*args)

    monkeypatch.setattr(history_like, "load_embedder", held_load)
    answers: list = []
    first = threading.Thread(target=lambda: answers.append(get(f"{url}/api/history/search?like={ref}")))
    first.start()
    assert entered.wait(60), "the first like-query reached the model"
    status, busy, _ = get(f"{url}/api/history/search?like={ref}&camera=street-2")
    go_on.set()
    first.join(120)
    assert status == 503 and busy.startswith(b"busy: another like-query"), "refused while one embeds, not queued"
    status, body, _ = answers[0]
    assert status == 200, body
    answer = json.loads(body)
    assert answer["like"][0]["identity"] == 7 and answer["like"][0]["similarity"] > 0.99
    assert 11 not in [n["identity"] for n in answer["like"]], "below the match threshold"
    rows = answer["rows"]
    assert {r["like_identity"] for r in rows} == {7} and len(rows) == 5  # its timeline, merges followed
    assert rows[0]["crop_url"] and "crop_file" not in rows[0]
    filtered = json.loads(get(f"{url}/api/history/search?like={ref}&camera=street-2&like_top=1")[1])["rows"]
    assert {r["camera"] for r in filtered} == {"street-2"} and len(filtered) == 2
    assert len(loads) == 1, "the model loads once in the view's process"
    gone = SqliteHistory(history.folder, readonly=True).query(HistoryQuery(identity=11, limit=1))[0]
    (history.folder / gone["crop_path"]).unlink()  # as retention removes it
    for query, problem in [(f"like={gone['ref']}", "no crop kept with that row"),
                           ("like=edge-9-run-404", "no crop kept with that row (or no such row)"),
                           (f"like={ref}&identity=7", "like and identity both name the identity"),
                           (f"like={ref}&like_top=21", "like_top 21: expected 1..20"),
                           ("like=a%2Fb", "not a row id")]:  # fmt: skip
        status, body, _ = get(f"{url}/api/history/search?{query}")
        assert status == 400 and problem in body.decode() and b"\n" not in body.strip(), body
    found = counts(url)
    assert found["like_ok"] == 2 and found["like_busy"] == 1
    assert found["like_no_crop"] == 2
    assert found["like_bad_request"] == 3


def test_without_an_embedding_recognizer_like_is_a_400_naming_it(tmp_path, free_port, bikes_path):
    fill_history(bikes_path)
    data = demo_data(both_recognizers=True)
    data["recognizers"] = {n: r for n, r in data["recognizers"].items() if n != EMBEDDER}
    data["workers"] = {n: w for n, w in data["workers"].items() if w["recognizer"] != EMBEDDER}
    for edge in data["edges"].values():
        edge.get("roi", {}).pop("routes", None)
    data["ui"] = {"token": TOKEN, "port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    server = serve_view(load_config(path))
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        status, body, _ = get(f"{url}/api/history/search?like=anything")
        assert status == 400 and "needs the file's embedding recognizer: the file has none" in body.decode()
        assert counts(url) == {"like_no_recognizer": 1}
    finally:
        server.shutdown()

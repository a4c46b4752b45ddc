"""End to end: `vcascade run` on a short clip of real video, real models, real processes and sockets.

The demo as shipped: people and bikes go to the MobileNetV2 embedder (worker-1), vehicles to the PP-OCR text
recognizer (worker-2, ONNX, auto-split in two stages). Checks the accounting (sent = results + drops per
camera, and one output line per ROI), that both recognizers answer the classes routed to them with their own
head's fields, that the latency account is present, positive and sums to end_to_end, and that every process
serves Prometheus metrics that move while it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.demo import EMBEDDER, TEXT, scrape_metrics, short_demo, start_run, write_deployment
from tests.records import read_records
from vcascade.core.state_dir import state_path
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 40  # bikes.mp4 has no detection before frame 25; people and a car from frame 30 on
VEHICLES = ("car", "bus", "truck")
HOPS_BEFORE_WORKER = ["frame_wait", "detect", "crop_encode", "edge_queue", "transit_to_worker", "broker_queue"]
WORKER_HOPS = ["batch_wait", "preprocess", "stage0", "stage1", "head"]


def _deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = short_demo(tmp_path, free_port, FRAMES, both_recognizers=True)
    data["edges"]["edge-1"]["sinks"].append({"type": "zmq_pub", "endpoint": f"tcp://127.0.0.1:{free_port()}"})
    return write_deployment(tmp_path, data), data



def _sample(text: str, name: str) -> float:
    """Sum of every sample of one metric (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_run_short_clip_end_to_end(tmp_path, free_port, models_dir):
    config, data = _deployment(tmp_path, free_port)
    summary_path = tmp_path / "summary.json"
    proc = start_run(config, models_dir, summary_path)
    ports = {
        "edge": (data["edges"]["edge-1"]["metrics_port"], "vcascade_edge_frames_decoded_total"),
        "broker": (data["brokers"]["broker-1"]["metrics_port"], "vcascade_broker_rois_received_total"),
        "worker": (data["workers"]["worker-1"]["metrics_port"], "vcascade_worker_results_total"),
    }
    moved: set[str] = set()
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        for kind, (port, metric) in ports.items():
            if kind not in moved and _sample(scrape_metrics(port), metric) > 0:
                moved.add(kind)
        time.sleep(0.3)
    output = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    assert proc.returncode == 0, output
    assert moved == set(ports), f"metrics that never moved while running: {set(ports) - moved}\n{output}"
    assert "vcascade run summary" in output
    assert output.startswith("starting 1 broker, 2 workers, 1 edge: ")  # said before the workers' silent load
    assert "center ready after " in output

    summary = json.loads(summary_path.read_text())
    assert all(code == 0 for code in summary["exit_codes"].values()), summary["exit_codes"]
    (edge,) = [p for p in summary["processes"] if p["component"] == "edge"]
    records = read_records(tmp_path / "results.jsonl")
    written = {}
    for record in records:  # results by status, the other kinds (camera states) by kind
        key = record.get("status") or record["kind"]
        written[key] = written.get(key, 0) + 1
    every_line = {"written": written, "lost": {}, "queued": 0, "error": ""}
    assert edge["sinks"]["jsonl[0]"] == every_line  # the summary counts the sink's lines
    assert edge["sinks"]["zmq_pub[1]"] == every_line
    lines = [record for record in records if record["kind"] == "result"]
    assert "edge sinks" in output
    lines = [line for line in lines if line["status"] != "tracked"]  # followed detections, not ROIs
    for camera, tally in edge["cameras"].items():
        assert tally["frames"] == FRAMES and tally["state"] == "ended"
        assert tally["sent"] > 0
        assert tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally
        mine = [line for line in lines if line["camera"] == camera]
        assert len(mine) == tally["sent"]  # one output line per ROI: a result or a counted drop
        assert sum(line["status"] == "ok" for line in mine) == tally["results"]
    assert len({line["roi_id"] for line in lines}) == len(lines)

    results = [line for line in lines if line["status"] == "ok"]
    assert len(results) >= 0.9 * len(lines), "most ROIs of an unloaded run must get a result"
    for line in results:
        _check_result_line(line)
    assert {line["recognizer"] for line in results} == {EMBEDDER, TEXT}, "both recognizers answer"
    assert edge["history"]["stored"]["result"] == len(results) and edge["history"]["dropped"] == {}
    assert edge["history"]["stored"]["camera_state"] == written["camera_state"]
    _check_history(config, results, models_dir)


def _check_history(config: Path, results: list[dict], models_dir: Path) -> None:
    """Every ok result is in the history store (nothing to configure) with its identity or text and its crop, and
    ``vcascade search`` finds an identity's rows, and (``--like``) the identity from one of its crops."""
    store = SqliteHistory(state_path("history"), readonly=True)
    rows = {row["ref"]: row for row in store.query(HistoryQuery(limit=100_000))}
    assert set(rows) == {line["roi_id"] for line in results}
    for line in results:
        row = rows[line["roi_id"]]
        assert (row["camera"], row["track_id"], row["class_name"]) == (line["camera"], line["track_id"],
                                                                      line["class_name"])
        assert row["identity"] == line.get("identity_id") and row["text"] == line.get("text")
        if row["identity"] is not None or row["text"]:
            assert (store.folder / row["crop_path"]).read_bytes()[:2] == b"\xff\xd8"
    identity = next(line["identity_id"] for line in results if "identity_id" in line)
    done = subprocess.run([sys.executable, "-m", "vcascade", "search", str(config), "--identity", str(identity),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = {row["ref"] for row in json.loads(done.stdout)}
    assert {line["roi_id"] for line in results if line.get("identity_id") == identity} <= found
    crop = next(store.folder / row["crop_path"] for row in rows.values() if row["identity"] == identity)
    done = subprocess.run([sys.executable, "-m", "vcascade", "search", str(config), "--like", str(crop), "--json",
                           "--model-dir", str(models_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    like = json.loads(done.stdout)
    assert like and like[0]["like_identity"] == identity and like[0]["like_similarity"] > 0.8  # its own crop


def _check_result_line(line: dict) -> None:
    assert line["camera"] in ("street-1", "street-2")
    assert 0 <= line["frame_seq"] < FRAMES
    assert line["stream_ts_ms"] == pytest.approx(line["frame_seq"] * 40.0)  # bikes.mp4 is 25 fps
    x1, y1, x2, y2 = line["bbox_xyxy"]
    assert 0 <= x1 < x2 <= 640 and 0 <= y1 < y2 <= 272
    assert line["class_name"] in ("person", "bicycle", "car", "motorbike", "bus", "truck")
    assert 0.35 <= line["score"] <= 1
    if line["class_name"] in VEHICLES:  # routed to the text recognizer: its head's fields, no identity
        assert line["recognizer"] == TEXT and line["worker"] == "worker-2" and "identity_id" not in line
        assert isinstance(line["text"], str) and 0.0 <= line["text_score"] <= 1.0
        assert all(len(region["box"]) == 4 for region in line["texts"])  # every region read, box in crop px
        assert line["text"] == "" or line["text"] in [region["text"] for region in line["texts"]]
    else:
        assert line["recognizer"] == EMBEDDER and line["worker"] == "worker-1" and "text" not in line
        assert isinstance(line["identity_id"], int) and line["identity_id"] >= 0
        assert -1.0 <= line["similarity"] <= 1.0001
    latency = line["latency_ms"]
    assert list(latency) == [*HOPS_BEFORE_WORKER, *WORKER_HOPS, "transit_back", "end_to_end"]
    assert all(ms >= 0 for ms in latency.values()), latency
    assert latency["detect"] > 0 and latency["stage0"] > 0 and latency["stage1"] > 0 and latency["end_to_end"] > 0
    parts = sum(ms for hop, ms in latency.items() if hop != "end_to_end")
    assert parts == pytest.approx(latency["end_to_end"], abs=0.05)

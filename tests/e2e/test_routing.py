"""End to end: ROIs routed by class to two recognizers, each in its own worker (`vcascade run`, real processes).

One edge reads bikes.mp4 on two cameras, one broker, two workers running two differently named recognizers
(the MobileNetV2 embedder split in two stages, and the same model unsplit). Routes: person -> the split one,
car/bicycle/motorbike -> the unsplit one, other classes (bus, truck) -> no route (not sent). Checks: every answer comes from a
worker of the ROI's recognizer, a track keeps one recognizer (the class of its first ROI decides), the
accounting holds per camera, and the per-recognizer metrics of the edge and the broker move.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.demo import scrape_metrics, short_demo, start_run, write_deployment
from tests.records import result_lines

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 60  # bikes.mp4 (YOLOX-nano, score 0.35): people and cars from frame 30 on, bicycles from 110, buses 80
PEOPLE, VEHICLES = "embedder-people", "embedder-vehicles"
ROUTES = [{"recognizer": PEOPLE, "classes": ["person"]}, {"recognizer": VEHICLES, "classes": ["car", "bicycle", "motorbike"]}]
ROUTE_OF = {"person": PEOPLE, "car": VEHICLES, "bicycle": VEHICLES, "motorbike": VEHICLES}
WORKER_RECOGNIZER = {"worker-people": PEOPLE, "worker-vehicles": VEHICLES}


def _deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = short_demo(tmp_path, free_port, FRAMES)
    data["edges"]["edge-1"]["roi"]["routes"] = ROUTES
    embedder = data["recognizers"].pop("mobilenetv2-embedder")
    data["recognizers"] = {PEOPLE: embedder, VEHICLES: {**embedder, "split_points": []}}
    worker = data["workers"].pop("worker-1")
    data["workers"] = {
        "worker-people": {**worker, "recognizer": PEOPLE, "devices": ["cpu", "cpu"], "metrics_port": free_port()},
        "worker-vehicles": {**worker, "recognizer": VEHICLES, "devices": ["cpu"], "metrics_port": free_port()},
    }
    return write_deployment(tmp_path, data), data



def _samples(text: str, name: str) -> dict[str, float]:
    """Every sample of one metric: the label text (inside the braces) -> value."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit("} ", 1)
            out[labels] = float(value)
    return out


def _by_label(samples: dict[str, float], label: str) -> dict[str, float]:
    """Sum of the samples by the value of one label."""
    out: dict[str, float] = {}
    for labels, value in samples.items():
        for part in labels.split(","):
            key, _, quoted = part.partition("=")
            if key == label:
                out[quoted.strip('"')] = out.get(quoted.strip('"'), 0.0) + value
    return out


def test_rois_reach_only_workers_of_their_recognizer(tmp_path, free_port, models_dir):
    config, data = _deployment(tmp_path, free_port)
    summary_path = tmp_path / "summary.json"
    proc = start_run(config, models_dir, summary_path)
    edge_port = data["edges"]["edge-1"]["metrics_port"]
    broker_port = data["brokers"]["broker-1"]["metrics_port"]
    edge_text = broker_text = ""
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:  # keep the last scrape of each while it runs
        edge_text = scrape_metrics(edge_port) or edge_text
        broker_text = scrape_metrics(broker_port) or broker_text
        time.sleep(0.5)
    output = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    assert proc.returncode == 0, output

    summary = json.loads(summary_path.read_text())
    (edge,) = [p for p in summary["processes"] if p["component"] == "edge"]
    lines = result_lines(tmp_path / "results.jsonl")
    rois = [line for line in lines if line["status"] != "tracked"]
    for camera, tally in edge["cameras"].items():
        assert tally["sent"] > 0 and tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally
        mine = [line for line in rois if line["camera"] == camera]
        assert len(mine) == tally["sent"] and sum(line["status"] == "ok" for line in mine) == tally["results"]

    results = [line for line in rois if line["status"] == "ok"]
    assert len(results) >= 0.9 * len(rois), output
    for line in results:  # the broker gave each ROI only to a worker of its recognizer
        assert WORKER_RECOGNIZER[line["worker"]] == line["recognizer"], line
    tracks: dict[tuple[str, int], list[dict]] = {}
    for line in rois:
        assert line["recognizer"] in (PEOPLE, VEHICLES) and line["class_name"] in ROUTE_OF, line  # others: no route
        tracks.setdefault((line["camera"], line["track_id"]), []).append(line)
    for track in tracks.values():  # a track keeps the recognizer its first ROI's class chose
        first = min(track, key=lambda line: (line["frame_seq"], line["roi_id"]))
        assert {line["recognizer"] for line in track} == {ROUTE_OF[first["class_name"]]}, track
    answered_by = {line["recognizer"] for line in results}
    counts = {rec: sum(line["recognizer"] == rec for line in results) for rec in (PEOPLE, VEHICLES)}
    print(f"routing e2e: {len(rois)} ROIs on {len(tracks)} tracks, results by recognizer {counts}")
    assert answered_by == {PEOPLE, VEHICLES}, f"both recognizers must answer on bikes.mp4: {answered_by}"

    sent = _by_label(_samples(edge_text, "vcascade_edge_recognizer_rois_sent_total"), "recognizer")
    assert sent.get(PEOPLE, 0) > 0 and sent.get(VEHICLES, 0) > 0, sent
    dispatched = _by_label(_samples(broker_text, "vcascade_broker_recognizer_rois_dispatched_total"), "recognizer")
    assert dispatched.get(PEOPLE, 0) > 0 and dispatched.get(VEHICLES, 0) > 0, dispatched
    workers = _by_label(_samples(broker_text, "vcascade_broker_recognizer_workers"), "recognizer")
    assert workers.get(PEOPLE) == 1 and workers.get(VEHICLES) == 1, workers

"""End to end: `vcascade run` with the recognizer's second stage in a stage-group process (real video, models,
processes and sockets): every ROI accounted, results carry the link hop, the group's metrics move."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.demo import scrape_metrics, short_demo, start_run, write_deployment
from tests.e2e.test_run_demo import _sample
from tests.records import result_lines

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 35  # bikes.mp4 has no detection before frame 25: a dozen ROIs


def test_run_with_a_stage_group_accounts_every_roi(tmp_path, free_port, models_dir):
    data = short_demo(tmp_path, free_port, FRAMES)
    del data["cameras"]["street-2"]
    data["workers"]["worker-1"].update(devices=["cpu"], downstream="stages-b")
    group_metrics = free_port()
    data["stage_groups"] = {"stages-b": {"port": free_port(), "metrics_port": group_metrics, "devices": ["cpu"]}}
    config = write_deployment(tmp_path, data)

    proc = start_run(config, models_dir, tmp_path / "summary.json")
    moved, deadline = False, time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        moved = moved or _sample(scrape_metrics(group_metrics), "vcascade_stage_group_batches_total") > 0
        time.sleep(0.3)
    output = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    assert proc.returncode == 0, output
    assert moved, "the stage group's metrics never moved"

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_codes"] == {"broker broker-1": 0, "stage-group stages-b": 0, "worker worker-1": 0, "edge edge-1": 0}
    (group,) = [p for p in summary["processes"] if p["component"] == "stage_group"]
    (worker,) = [p for p in summary["processes"] if p["component"] == "worker"]
    assert group["answered"] == worker["batches"] > 0 and set(group["stage_ms"]) == {"stage1"}
    assert worker["drops"] == {} and worker["results"] == worker["rois"]  # the group served before the worker
    lines = result_lines(tmp_path / "results.jsonl")
    results = [line for line in lines if line["status"] == "ok"]
    assert results and len(results) == worker["results"]
    for line in results:
        hops = list(line["latency_ms"])
        assert hops[hops.index("batch_wait"):hops.index("head") + 1] == [
            "batch_wait", "preprocess", "stage0", "stage1", "link", "head"]
        parts = sum(ms for hop, ms in line["latency_ms"].items() if hop != "end_to_end")
        assert parts == pytest.approx(line["latency_ms"]["end_to_end"], abs=0.05)

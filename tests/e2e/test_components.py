"""Each component runs alone from the CLI (as on separate hosts) and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data
from tests.records import result_lines

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_edge_broker_worker_as_separate_commands(tmp_path, free_port, models_dir):
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"]["max_frames"] = 32
    edge = data["edges"]["edge-1"]
    edge["sinks"] = [{"type": "jsonl", "path": str(tmp_path / "results.jsonl")}]
    edge["metrics_port"] = free_port()
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))

    def start(kind: str, name: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    broker = start("broker", "broker-1")
    worker = start("worker", "worker-1")
    try:
        edge_proc = start("edge", "edge-1", "--model-dir", str(models_dir))
        out, err = edge_proc.communicate(timeout=240)
        assert edge_proc.returncode == 0, err
        final = json.loads(out)
        tally = final["cameras"]["street-1"]
        assert tally["frames"] == 32 and tally["sent"] > 0
        assert tally["sent"] == tally["results"] + sum(tally["drops"].values())
        lines = result_lines(tmp_path / "results.jsonl")
        assert sum(line["status"] != "tracked" for line in lines) == tally["sent"]
    finally:
        for proc in (worker, broker):
            proc.send_signal(signal.SIGTERM)
        for proc in (worker, broker):
            out, err = proc.communicate(timeout=120)  # a bound, not a wait: a loaded machine stops a worker slowly
            assert proc.returncode == 0, err
    assert json.loads(out)["component"] == "broker"


def test_unknown_component_name_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "vcascade", "broker", "--config", str(REPO / "configs" / "demo.yaml"),
         "--name", "nope"], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "no broker named 'nope'" in proc.stderr and "Traceback" not in proc.stderr

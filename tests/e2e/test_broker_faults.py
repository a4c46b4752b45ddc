"""Broker faults over real processes: `vcascade broker` and `vcascade worker` CLI processes, real JPEG crops of
bikes.mp4, and a small DEALER client in the test playing the edge (it speaks the wire protocol; edge/link/broker_link.py
is not needed to exercise the broker)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import pytest
import yaml
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.demo import demo_data
from vcascade.broker.server import DRAIN_TIMEOUT_S as BROKER_DRAIN_S
from vcascade.center.worker import DRAIN_TIMEOUT_S as WORKER_DRAIN_S
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 180
"""Generous: a worker imports torch and splits the model, on a shared 2-core machine."""
EXIT_MARGIN_S = 10
"""Slack on top of a component's drain timeout for interpreter exit on a busy machine."""


@pytest.fixture(scope="module")
def jpeg_crops(bikes_path) -> list[bytes]:
    """Eight real crops (JPEG, quality 90) from frame 150 of bikes.mp4 (640x272): 8 columns of 80 px."""
    cap = cv2.VideoCapture(str(bikes_path))
    for _ in range(151):
        ok, frame = cap.read()
        assert ok
    cap.release()
    return [cv2.imencode(".jpg", frame[40:272, x : x + 80], [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
            for x in range(0, 640, 80)]  # fmt: skip


@dataclass
class Cluster:
    """A deployment file and the component processes started from it."""

    config: Path
    data: dict
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, kind: str, name: str) -> subprocess.Popen:
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "vcascade", kind, "--config", str(self.config), "--name", name,
             "--log-level", "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        return self.procs[name]

    def endpoint(self, side: str) -> str:
        return f"tcp://127.0.0.1:{self.data['brokers']['broker-1'][f'{side}_port']}"

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the broker's /metrics (0.0 when absent)."""
        port = self.data["brokers"]["broker-1"]["metrics_port"]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def wait_workers(self, n: int) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited: {proc.communicate()[1][-2000:]}"
            try:
                if self.metric("vcascade_broker_workers") >= n:
                    return
            except OSError:
                pass  # metrics server not up yet
            time.sleep(0.5)
        raise AssertionError(f"{n} workers did not register within {STARTUP_S} s")

    def stop(self, name: str, within_s: float) -> tuple[int, float, str]:
        """SIGTERM ``name``; returns (exit code, seconds to exit, stdout). Fails if it takes over ``within_s``."""
        proc = self.procs[name]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=within_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{name} still running {within_s} s after SIGTERM") from None
        assert proc.returncode == 0, err[-3000:]
        return proc.returncode, time.monotonic() - t0, out

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture
def cluster(tmp_path, free_port):
    """``cluster(workers={name: overrides}) -> Cluster``: demo deployment, one broker, these workers."""
    made: list[Cluster] = []

    def make(workers: dict[str, dict]) -> Cluster:
        data = demo_data()
        data["edges"]["edge-1"].update(metrics_port=free_port(), sinks=[])
        ports = {"frontend_port": free_port(), "backend_port": free_port(), "metrics_port": free_port()}
        data["brokers"]["broker-1"].update(ports)
        base = data["workers"].pop("worker-1")
        for name, overrides in workers.items():
            data["workers"][name] = {**base, "metrics_port": free_port(), **overrides}
        data["heartbeat"] = {"interval_s": 0.5, "liveness": 3}
        config = tmp_path / "deploy.yaml"
        config.write_text(yaml.safe_dump(data))
        made.append(Cluster(config, data))
        return made[-1]

    yield make
    for c in made:
        c.kill_all()


class Edge:
    """A real DEALER speaking the wire protocol as an edge: sends ROIs, collects every answer by roi_id."""

    def __init__(self, endpoint: str, crops: list[bytes]) -> None:
        self.sock = make_socket(zmq.Context.instance(), zmq.DEALER, identity="edge-test")
        self.sock.connect(endpoint)
        self.crops = crops
        self.sent_s: dict[str, float] = {}
        self.answers: dict[str, list[tuple[float, wire.Message]]] = {}

    def send(self, roi_id: str, camera: str) -> None:
        roi = wire.Roi(
            roi_id=roi_id, camera=camera, frame_seq=len(self.sent_s), stream_ts_ms=0.0, capture_unix_ms=0.0,
            xyxy=(0.0, 40.0, 80.0, 272.0), crop_xyxy=(0, 40, 80, 272), class_id=1, score=0.9,
        )  # fmt: skip
        self.sent_s[roi_id] = time.monotonic()
        self.sock.send_multipart([wire.encode(roi), self.crops[len(self.sent_s) % len(self.crops)]])

    def collect(self, timeout_s: float) -> None:
        """Read answers for up to ``timeout_s`` (returns early once every ROI sent has one)."""
        deadline = time.monotonic() + timeout_s
        while len(self.answers) < len(self.sent_s) and self.sock.poll(_ms_left(deadline)):
            while self.sock.poll(0):
                header = wire.split_message(self.sock.recv_multipart(), 0)[1]
                if isinstance(header, (wire.Result, wire.Drop)):
                    self.answers.setdefault(header.roi_id, []).append((time.monotonic(), header))

    def read_for(self, seconds: float) -> None:
        """Read answers for exactly ``seconds`` (keeps a sender's pace)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.sock.poll(max(1, int(left * 1000))):
                self.collect(0)

    def first_answers(self) -> list[wire.Message]:
        return [answers[0][1] for answers in self.answers.values()]

    def latency_s(self, roi_id: str) -> float:
        return self.answers[roi_id][0][0] - self.sent_s[roi_id]

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.mark.alone  # compares camera B's latency alone and under flood: other tests' load would move one, not the other
def test_fair_under_flood_survives_a_killed_worker_and_stops_on_time_with_peers_gone(cluster, jpeg_crops):
    """One cluster (worker start-up dominates the cost), four phases: a flooding camera does not delay another;
    a worker killed mid-stream loses nothing; a worker whose broker was killed stops on SIGTERM in bounded time;
    so does a broker whose edge and workers are gone."""
    worker = {"credits": 8, "max_batch": 8, "max_wait_ms": 20}
    c = cluster({"w1": worker, "w2": worker})
    c.start("broker", "broker-1")
    c.start("worker", "w1")
    c.start("worker", "w2")
    c.wait_workers(2)
    edge = Edge(c.endpoint("frontend"), jpeg_crops)
    try:
        _flood_does_not_delay_another_camera(edge)
        _killed_worker_loses_nothing(c, edge)
        for i in range(16):
            edge.send(f"last{i}", camera="cam-b")
        time.sleep(0.5)
        c.procs["broker-1"].kill()  # kill -9 the broker while w2 holds ROIs
    finally:
        edge.close()
    _, took_s, out = c.stop("w2", within_s=WORKER_DRAIN_S + 1 + EXIT_MARGIN_S)
    assert '"component": "worker"' in out, out
    print(f"worker exited {took_s:.1f} s after SIGTERM with its broker gone")
    _broker_stops_on_time_with_peers_gone(c, jpeg_crops)


def _flood_does_not_delay_another_camera(edge: Edge) -> None:
    _paced(edge, "alone", "cam-b", n=8)
    alone = [edge.latency_s(f"alone{i}") for i in range(8)]
    for i in range(200):
        edge.send(f"flood{i}", camera="cam-a")
    _paced(edge, "busy", "cam-b", n=8)
    busy = [edge.latency_s(f"busy{i}") for i in range(8)]
    flood_done = sum(1 for rid in edge.answers if rid.startswith("flood"))
    assert flood_done < 200, "the flood was over before camera B was measured"
    # Without per-camera round robin B would wait behind the flood: ~200/16 micro-batches. With it, B waits for
    # at most about one micro-batch of A's per worker. The bound is generous for a shared CI machine.
    bound_s = 3 * statistics.median(alone) + 2.0
    print(f"camera B latency alone p50={statistics.median(alone):.2f}s, during flood "
          f"p50={statistics.median(busy):.2f}s (bound {bound_s:.2f}s), flood answered {flood_done}/200")  # fmt: skip
    assert statistics.median(busy) <= bound_s


def _killed_worker_loses_nothing(c: Cluster, edge: Edge) -> None:
    """Kill -9 w1 while it holds flood ROIs; every ROI is still answered exactly once, w2 takes the load.

    The load taken over is ROIs sent after the kill: a dead process cannot answer them, so each must come back
    as w2's result, whether the broker first gave it to w1 (re-dispatched once w1 is lost) or to w2. (Results
    timed after the kill proved nothing when w2 had finished the flood before then.)"""
    c.procs["w1"].kill()
    for i in range(16):
        edge.send(f"after-kill{i}", camera="cam-a")
    edge.collect(240)
    time.sleep(1.0)
    edge.collect(0.5)  # anything late or duplicated would show up now
    assert all(len(a) == 1 for a in edge.answers.values()), "an ROI answered twice"
    assert set(edge.answers) == set(edge.sent_s), f"unanswered: {set(edge.sent_s) - set(edge.answers)}"
    answers = edge.first_answers()
    results = [m for m in answers if isinstance(m, wire.Result)]
    drops = [m for m in answers if isinstance(m, wire.Drop)]
    assert len(edge.sent_s) == len(results) + len(drops)
    after = [edge.answers[f"after-kill{i}"][0][1] for i in range(16)]
    assert all(isinstance(m, wire.Result) and m.worker == "w2" for m in after), after  # the survivor takes the load
    redispatched = c.metric("vcascade_broker_rois_redispatched_total")
    assert redispatched > 0
    print(f"accounting: sent={len(edge.sent_s)} results={len(results)} drops={len(drops)} "
          f"({', '.join(sorted({d.reason for d in drops}))}) redispatched={int(redispatched)} "
          f"by_w1={sum(r.worker == 'w1' for r in results)} by_w2={sum(r.worker == 'w2' for r in results)} "
          "duplicates=0")  # fmt: skip


def _broker_stops_on_time_with_peers_gone(c: Cluster, crops: list[bytes]) -> None:
    """A fresh broker process: an edge sends, a worker takes ROIs, both vanish; SIGTERM still ends it in time."""
    c.start("broker", "broker-1")
    worker = make_socket(zmq.Context.instance(), zmq.DEALER, identity="doomed-worker")
    worker.connect(c.endpoint("backend"))
    edge = Edge(c.endpoint("frontend"), crops)
    try:
        worker.send(wire.encode(wire.Ready(worker="doomed-worker", credits=4, recognizer="embed")))
        for i in range(8):
            edge.send(f"gone{i}", camera="cam-b")
        assert worker.poll(30_000), "the restarted broker dispatched nothing"
    finally:
        worker.close(linger=0)
        edge.close()
    _, took_s, out = c.stop("broker-1", within_s=BROKER_DRAIN_S + EXIT_MARGIN_S)
    assert '"component": "broker"' in out, out
    print(f"broker exited {took_s:.1f} s after SIGTERM with its peers gone")


def _paced(edge: Edge, prefix: str, camera: str, n: int, interval_s: float = 0.25) -> None:
    """Send ``n`` ROIs of ``camera`` every ``interval_s`` (a live camera's pace), then wait for their answers."""
    for i in range(n):
        edge.send(f"{prefix}{i}", camera)
        edge.read_for(interval_s)
    deadline = time.monotonic() + 120
    while not all(f"{prefix}{i}" in edge.answers for i in range(n)):
        assert time.monotonic() < deadline, f"{prefix}: answers missing"
        edge.collect(0.5)


def _ms_left(deadline: float) -> int:
    """Milliseconds until ``deadline`` (time.monotonic() seconds), at least 0."""
    return max(0, int((deadline - time.monotonic()) * 1000))

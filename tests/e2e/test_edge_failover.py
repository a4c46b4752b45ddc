"""Broker failover seen from the edge, over real processes and sockets (issue 4, items 4, 5 and 10).

Two ``vcascade broker`` processes, one ``vcascade worker`` connected to both, one ``vcascade edge`` on
bikes.mp4. Killing one broker (SIGKILL) mid-stream loses no ROI: those it held are retried through the other
broker or end as counted drops, the books balance (``sent = results + drops``) in the JSONL sink and in the
summary, and no ROI has two lines. Restarting the killed broker on the same ports brings it back into use.
With no broker up at all, the edge keeps detecting, drops its oldest queued ROIs (``no_broker``) and sends as
soon as a broker appears. Progress is read from the edge's Prometheus endpoint, as an operator would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.demo import demo_data, largest_sample
from tests.records import result_lines

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 90.0
"""Generous bound for each stage of a test to be reached on a slow shared machine."""


def _write_config(tmp_path: Path, free_port, n_brokers: int, **edge_overrides) -> Path:
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"]["max_frames"] = 250
    names = [f"broker-{i + 1}" for i in range(n_brokers)]
    data["brokers"] = {
        name: {"frontend_port": free_port(), "backend_port": free_port(), "metrics_port": free_port()} for name in names
    }
    data["heartbeat"] = {"interval_s": 0.5, "liveness": 4}
    edge = data["edges"]["edge-1"]
    edge["roi"].setdefault("policy", {})["mode"] = "every_detection"  # an ROI per detection: a steady stream
    edge.update(
        brokers=names, sinks=[{"type": "jsonl", "path": str(tmp_path / "results.jsonl")}], metrics_port=free_port(),
        max_in_flight=8, send_queue_max=8, roi_timeout_s=30.0, max_attempts=2, drain_timeout_s=30.0,
        **edge_overrides,
    )
    worker = data["workers"]["worker-1"]
    worker.update(brokers=names, metrics_port=free_port(), credits=16)
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Cluster:
    """The processes of one test, started from the CLI; every one still running is killed at the end."""

    def __init__(self, config: Path, models_dir: Path) -> None:
        self.config, self.models_dir = config, models_dir
        self.data = yaml.safe_load(config.read_text())
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, kind: str, name: str) -> subprocess.Popen:
        extra = ["--model-dir", str(self.models_dir)] if kind == "edge" else []
        proc = subprocess.Popen(
            [sys.executable, "-m", "vcascade", kind, "--config", str(self.config), "--name", name,
             "--log-level", "WARNING", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.procs[name] = proc
        return proc

    def stop(self, name: str) -> dict:
        """SIGTERM one process, wait for it, return its final JSON report."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=STEP_TIMEOUT_S)
        assert proc.returncode == 0, err[-3000:]
        return json.loads(out)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)

    def edge_metrics(self) -> dict[tuple[str, tuple], float]:
        """The edge's samples as ``{(name, sorted label items): value}``; empty while it is not serving yet."""
        port = self.data["edges"]["edge-1"]["metrics_port"]
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return {}
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def metric(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted({"edge": "edge-1", **labels}.items())))
        return self.edge_metrics().get(key, 0.0)

    def broker_metric(self, broker: str, name: str) -> float:
        """The largest sample ``name`` on one broker; 0 while it is not serving."""
        return largest_sample(self.data["brokers"][broker]["metrics_port"], name)

    def wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not condition():
            edge = self.procs.get("edge-1")
            if edge is not None and edge.poll() is not None:
                out, err = edge.communicate()
                pytest.fail(f"edge exited before {what}: {out[-3000:]} {err[-3000:]}")
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)


def _check_books(final: dict, jsonl: Path) -> tuple[dict, list[dict]]:
    """Accounting of the run: summary and sink agree, every ROI has exactly one line."""
    tally = final["cameras"]["street-1"]
    lines = result_lines(jsonl)
    assert tally["sent"] == tally["results"] + sum(tally["drops"].values())
    assert len(lines) == tally["sent"]
    assert not [rid for rid, n in Counter(line["roi_id"] for line in lines).items() if n > 1], "duplicate lines"
    assert sum(line["status"] == "ok" for line in lines) == tally["results"]
    return tally, lines


@pytest.fixture
def cluster_factory(models_dir):
    made = []

    def make(config: Path) -> Cluster:
        made.append(Cluster(config, models_dir))
        return made[-1]

    yield make
    for cluster in made:
        cluster.kill_all()


def test_kill_and_restart_a_broker_mid_stream(tmp_path, free_port, cluster_factory):
    cluster = cluster_factory(_write_config(tmp_path, free_port, n_brokers=2))
    for name in ("broker-1", "broker-2"):
        cluster.start("broker", name)
    cluster.start("worker", "worker-1")
    # the worker's models load slowly under load: the edge's 250 frames must meet a worker on both brokers
    cluster.wait_for(
        lambda: all(cluster.broker_metric(b, "vcascade_broker_workers") >= 1 for b in ("broker-1", "broker-2")),
        "the worker on both brokers",
    )
    cluster.start("edge", "edge-1")

    def sent_to(broker: str) -> float:
        return cluster.metric("vcascade_edge_broker_rois_sent_total", broker=broker)

    def up(broker: str) -> float:
        return cluster.metric("vcascade_edge_broker_up", broker=broker)

    cluster.wait_for(
        lambda: sent_to("broker-1") >= 5 and sent_to("broker-2") >= 5
        and cluster.metric("vcascade_edge_results_total", camera="street-1") >= 10,
        "ROIs flowing through both brokers",
    )

    cluster.procs["broker-1"].kill()  # SIGKILL: no Bye, no drain; its ROIs are in flight nowhere
    cluster.procs["broker-1"].communicate(timeout=30)
    cluster.wait_for(lambda: up("broker-1") == 0.0, "broker-1 declared dead")
    results_at_death = cluster.metric("vcascade_edge_results_total", camera="street-1")
    cluster.wait_for(
        lambda: cluster.metric("vcascade_edge_results_total", camera="street-1") >= results_at_death + 10,
        "results through the surviving broker",
    )

    sent_while_dead = sent_to("broker-1")
    cluster.start("broker", "broker-1")  # same ports
    cluster.wait_for(lambda: up("broker-1") == 1.0, "broker-1 alive again")
    cluster.wait_for(lambda: sent_to("broker-1") >= sent_while_dead + 5, "ROIs sent to the restarted broker")
    retries = cluster.metric("vcascade_edge_roi_retries_total", reason="broker_lost") + cluster.metric(
        "vcascade_edge_roi_retries_total", reason="timeout"
    )

    final = cluster.stop("edge-1")
    tally, lines = _check_books(final, tmp_path / "results.jsonl")
    assert tally["results"] >= 0.8 * tally["sent"], tally
    assert retries >= 1  # what broker-1 held when it died was sent again...
    assert any(line["status"] == "ok" and line["attempt"] >= 1 for line in lines)  # ...and answered
    assert final["brokers"]["broker-1"]["up"] and final["brokers"]["broker-1"]["sent"] > sent_while_dead
    restarted = cluster.stop("broker-1")
    assert restarted["received"] >= 5  # the new broker-1 process really served this edge
    cluster.stop("worker-1")
    cluster.stop("broker-2")


def test_no_broker_at_start_queues_bounded_then_flows(tmp_path, free_port, cluster_factory):
    cluster = cluster_factory(_write_config(tmp_path, free_port, n_brokers=1))
    cluster.start("worker", "worker-1")
    cluster.start("edge", "edge-1")
    drops = "vcascade_edge_roi_drops_total"
    cluster.wait_for(
        lambda: cluster.metric(drops, camera="street-1", reason="no_broker") >= 5, "oldest ROIs dropped, no broker up"
    )
    assert cluster.metric("vcascade_edge_send_queue_depth") <= 8  # bounded by send_queue_max

    cluster.start("broker", "broker-1")
    cluster.wait_for(lambda: cluster.metric("vcascade_edge_results_total", camera="street-1") >= 10, "results")
    final = cluster.stop("edge-1")
    tally, _ = _check_books(final, tmp_path / "results.jsonl")
    assert tally["drops"].get("no_broker", 0) >= 5 and tally["results"] >= 10
    assert final["brokers"]["broker-1"]["up"]
    cluster.stop("worker-1")
    cluster.stop("broker-1")

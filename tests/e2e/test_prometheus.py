"""A real Prometheus (Debian package) scrapes a running deployment through the configuration that
`vcascade prometheus-config` generates, loads the alert rules, and answers queries for the vcascade series;
`vcascade status --once` reads the same endpoints while it runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
STARTUP_S = 180.0
"""Generous: the worker imports torch and splits its model on a shared 2-core machine."""


def _deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(realtime=True, loop=True)  # streams like a live camera until stopped
    edge = data["edges"]["edge-1"]
    edge["sinks"] = [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}]
    edge.update(drain_timeout_s=5.0, max_in_flight=4)  # SIGTERM ends the test: bounded drain
    edge["metrics_port"] = free_port()
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _vcascade(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcascade", *args], capture_output=True, text=True, **kwargs)


@pytest.fixture
def prometheus(tmp_path, free_port):
    """Start /usr/bin/prometheus on a config written by `vcascade prometheus-config`; yields (deploy file,
    deployment dict, query function). Skips when the Debian ``prometheus`` package is not installed."""
    if not Path(PROMETHEUS).is_file():
        pytest.skip("prometheus not installed (Debian package `prometheus`, see scripts/test.sh)")
    config, data = _deployment(tmp_path, free_port)
    prom_config = tmp_path / "prometheus.yml"
    gen = _vcascade("prometheus-config", str(config), "--scrape-interval", "1", "--rule-file",
                    str(REPO / "configs" / "prometheus" / "alerts.yml"), "-o", str(prom_config), timeout=60)
    assert gen.returncode == 0, gen.stderr
    port = free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(base):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "prometheus did not become ready in 60 s"
            time.sleep(0.2)
        yield config, data, lambda q: _query(base, q), base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(base: str) -> bool:
    try:
        return urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200
    except OSError:
        return False


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def _readyz(port: int) -> int:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def _values(result: list[dict], key: str) -> dict[str, float]:
    return {r["metric"].get(key, ""): float(r["value"][1]) for r in result}


def _start(config: Path, kind: str, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name, "--log-level",
         "WARNING", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_prometheus_scrapes_every_component_and_finds_the_series(prometheus, models_dir):
    config, data, query, base = prometheus
    procs = {"broker": _start(config, "broker", "broker-1"), "worker": _start(config, "worker", "worker-1"),
             "edge": _start(config, "edge", "edge-1", "--model-dir", str(models_dir))}  # fmt: skip
    wanted = {
        "edge": 'sum(vcascade_edge_frames_decoded_total{instance="edge-1",job="vcascade-edge"})',
        "results": 'sum(vcascade_edge_results_total{camera="street-1"})',
        "broker": 'sum(vcascade_broker_rois_received_total{instance="broker-1"})',
        "worker": 'sum(vcascade_worker_stage_busy_seconds_total{worker="worker-1",recognizer="mobilenetv2-embedder"})',
    }
    seen: dict[str, float] = {}
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and len(seen) < len(wanted):
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited: {proc.communicate()[1][-3000:]}"
            for key, promql in wanted.items():
                value = _values(query(promql), "").get("", 0.0)
                if value > 0:
                    seen[key] = value
            time.sleep(0.5)
        ports = {name: cfg["metrics_port"] for section in ("edges", "brokers", "workers")
                 for name, cfg in data[section].items()}  # fmt: skip
        ready = {name: _readyz(port) for name, port in ports.items()}
        status = _vcascade("status", str(config), "--once", "--interval", "1", timeout=60)
        up = _values(query('up{job=~"vcascade-.*"}'), "instance")
        p99 = query('histogram_quantile(0.99, sum by (le) (vcascade_edge_hop_seconds_bucket{hop="end_to_end"}))')
        info = _values(query("vcascade_build_info"), "component")
        rules = json.loads(urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10).read())
    finally:
        for name in ("edge", "worker", "broker"):  # SIGTERM: each drains and exits 0
            procs[name].terminate()
        codes = {name: (proc.wait(timeout=60), proc.communicate()[1]) for name, proc in procs.items()}
    assert set(seen) == set(wanted), f"never found in Prometheus: {set(wanted) - set(seen)}"
    assert up == {"edge-1": 1.0, "broker-1": 1.0, "worker-1": 1.0}
    assert ready == {"edge-1": 200, "broker-1": 200, "worker-1": 200}
    assert p99 and 0 < float(p99[0]["value"][1]) <= 60.0
    assert set(info) == {"edge", "broker", "worker"}
    alert_names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
    assert {"VcascadeCameraDown", "VcascadeWorkerGone", "VcascadeLatencyP99OverBudget"} <= alert_names
    assert status.returncode == 0, status.stderr
    for text in ("street-1", "streaming", "worker-1", "ready", "mobilenetv2-embedder"):
        assert text in status.stdout, status.stdout
    assert "unreachable" not in status.stdout and "not ready" not in status.stdout, status.stdout
    assert all(code == 0 for code, _ in codes.values()), {n: e[-2000:] for n, (c, e) in codes.items() if c}

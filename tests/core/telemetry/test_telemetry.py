"""The metrics HTTP server: /metrics, /healthz, /readyz (real sockets, real prometheus_client registry)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from vcascade.core.telemetry.health import Readiness
from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S, MetricsPortInUse, safe_label, serve_metrics


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served():
    readiness = Readiness()
    server = serve_metrics(0, "127.0.0.1", component="broker", name="broker-t", readiness=readiness)
    yield server.server_address[1], readiness
    server.shutdown()
    server.server_close()


def test_metrics_and_build_info_served(served):
    port, _ = served
    code, body = _get(port, "/metrics")
    assert code == 200
    assert 'vcascade_build_info{component="broker",name="broker-t"' in body
    assert "process_cpu_seconds_total" in body and "process_resident_memory_bytes" in body


def test_healthz_is_ok_while_the_process_runs(served):
    port, _ = served
    assert _get(port, "/healthz") == (200, "ok\n")
    assert _get(port, "/nope")[0] == 404


def test_readyz_follows_the_checks_and_names_what_is_missing(served):
    port, readiness = served
    code, body = _get(port, "/readyz")
    assert code == 503 and "no readiness check registered" in body
    workers = {"n": 0}
    readiness.set("broker:broker-t:bound", True)
    readiness.add_check("broker:broker-t:workers", lambda: (workers["n"] > 0, "no worker registered"))
    code, body = _get(port, "/readyz")
    assert code == 503
    assert json.loads(body) == {"ready": False, "failing": {"broker:broker-t:workers": "no worker registered"}}
    workers["n"] = 1
    assert _get(port, "/readyz") == (200, json.dumps({"ready": True, "failing": {}}) + "\n")
    readiness.add_check("broken", lambda: 1 / 0)
    code, body = _get(port, "/readyz")
    assert code == 503 and "ZeroDivisionError" in body
    readiness.remove("broken")
    readiness.remove("broker:broker-t:")
    assert _get(port, "/readyz")[0] == 503


def test_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(MetricsPortInUse, match="metrics port"):
            serve_metrics(taken.getsockname()[1], "127.0.0.1")


def test_latency_buckets_span_1ms_to_5s():
    finite = [b for b in LATENCY_BUCKETS_S if b != float("inf")]
    assert finite[0] == 0.001 and finite[-1] == 5.0 and finite == sorted(finite)


def test_safe_label_strips_credentials():
    assert "secret" not in safe_label("rtsp://admin:secret@10.0.0.5:554/stream")
    assert safe_label("street-1") == "street-1"

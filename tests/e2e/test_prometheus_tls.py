"""A real Prometheus (Debian package) scrapes a broker whose metrics need a bearer token over TLS (issue 28,
item 1), through the scrape configuration `vcascade prometheus-config` writes: ``authorization`` from a
credentials file and ``tls_config``. A scrape without the token is refused and the refusal counted; the token
never appears in the generated file or in any output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
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

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
TOKEN = "metrics-token-7f3a9c21d4e8b6a0"


def _vcascade(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcascade", *args], capture_output=True, text=True, timeout=60, **kwargs)


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "metrics.crt", tmp_path / "metrics.key"
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _deployment(tmp_path: Path, free_port, metrics: dict) -> tuple[Path, int]:
    data = demo_data()
    data["metrics"] = metrics
    port = free_port()
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=port)
    data["edges"]["edge-1"]["metrics_port"] = free_port()
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, port


def _get(url: str, context: ssl.SSLContext, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening yet
        return 0


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    return body["data"]["result"]


def test_prometheus_scrapes_with_the_token_over_tls_and_others_are_refused(tmp_path, free_port):
    if not (Path(PROMETHEUS).is_file() and Path(OPENSSL).is_file()):
        pytest.fail("needs the Debian packages prometheus and openssl (scripts/test.sh installs them)")
    cert, key = _certificate(tmp_path)
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    config, port = _deployment(tmp_path, free_port, {
        "token_file": str(token_file), "tls_cert_file": str(cert), "tls_key_file": str(key)})  # fmt: skip
    prom_config = tmp_path / "prometheus.yml"
    gen = _vcascade("prometheus-config", str(config), "--scrape-interval", "1", "-o", str(prom_config))
    assert gen.returncode == 0, gen.stderr
    written = prom_config.read_text()
    assert TOKEN not in written and TOKEN not in gen.stdout + gen.stderr
    job = next(j for j in yaml.safe_load(written)["scrape_configs"] if j["job_name"] == "vcascade-broker")
    assert job["scheme"] == "https" and job["tls_config"] == {"ca_file": str(cert)}
    assert job["authorization"] == {"type": "Bearer", "credentials_file": str(token_file)}

    broker = subprocess.Popen(
        [sys.executable, "-m", "vcascade", "broker", "--config", str(config), "--name", "broker-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    prom_port = free_port()
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base, context = f"http://127.0.0.1:{prom_port}", ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 120
        while _get(url.replace("/metrics", "/healthz"), context) != 200:
            assert broker.poll() is None, broker.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the broker's metrics did not come up"
            time.sleep(0.3)
        assert _get(url, context) == 401 and _get(url, context, "wrong-token-0123456789") == 401
        assert _get(url, context, TOKEN) == 200
        refused = 'vcascade_http_refused_total{job="vcascade-broker",server="metrics",reason="unauthorized"}'
        up = 'up{job="vcascade-broker",instance="broker-1"}'
        seen: dict[str, float] = {}
        while time.monotonic() < deadline and not (seen.get(up) == 1 and seen.get(refused, 0) >= 2):
            assert prom.poll() is None, prom.communicate()[1][-3000:]
            for promql in (up, refused):
                result = _query(base, promql) if _prom_ready(base) else []
                if result:
                    seen[promql] = float(result[0]["value"][1])
            time.sleep(0.5)
        assert seen.get(up) == 1, f"Prometheus did not scrape the broker over TLS with the token: {seen}"
        assert seen.get(refused, 0) >= 2, seen
        plain = subprocess.run([sys.executable, "-c", f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/metrics', timeout=5)"],
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        assert plain.returncode != 0  # plain HTTP does not get through a TLS port
    finally:
        prom.terminate()
        broker.send_signal(signal.SIGTERM)
        prom.wait(timeout=30)
        _, err = broker.communicate(timeout=60)
    assert TOKEN not in err


def _prom_ready(base: str) -> bool:
    try:
        return urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200
    except OSError:
        return False


def test_a_token_from_the_environment_needs_a_file_for_prometheus(tmp_path, free_port):
    config, _ = _deployment(tmp_path, free_port, {"bind": "0.0.0.0", "token": "${VCASCADE_METRICS_TOKEN}"})
    env = os.environ | {"VCASCADE_METRICS_TOKEN": TOKEN}
    refused = _vcascade("prometheus-config", str(config), env=env)
    assert refused.returncode == 2 and "--token-file" in refused.stderr and TOKEN not in refused.stderr + refused.stdout
    given = _vcascade("prometheus-config", str(config), "--token-file", "/etc/prometheus/vcascade.token", env=env)
    assert given.returncode == 0 and TOKEN not in given.stdout
    assert "credentials_file: /etc/prometheus/vcascade.token" in given.stdout


def test_a_non_loopback_metrics_bind_without_a_token_is_a_config_error(tmp_path, free_port):
    config, _ = _deployment(tmp_path, free_port, {"bind": "0.0.0.0"})
    check = _vcascade("check", str(config))
    assert check.returncode == 2 and "metrics.bind" in check.stderr + check.stdout, check.stderr

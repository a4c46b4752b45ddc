"""Installs per role (pyproject.toml's extras, docs/DEPLOY.md "Installs per role"): a broker host's install has no
torch, ONNX Runtime, OpenCV or PyAV and an edge's no torch; each role's commands, ``--help`` and ``vcascade check``
work in its own install, and a command of another role says in one line which extra to install.

The unmarked tests are cheap: they read the source (every library a role's path imports is declared for that
role in pyproject.toml) and the test environment (importing a role's path loads none of its forbidden libraries).
The tests marked ``installs`` install each role from a wheel of this checkout into its own virtual environment
(``python -m venv``, ``pip`` from the configured index), once per test session (the center's holds torch, about
1.9 GB; about 6 minutes in all on a loaded 2-core machine): they prove what the others cannot, that each role
runs without the libraries it must not load.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
import zmq
from packaging.requirements import Requirement

from tests.broker.conftest import deployment_data
from tests.broker.test_server import answer, recv, send_roi
from tests.test_layers import import_graph, source_modules
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket
from vcascade.app.cli import COMMANDS
from vcascade.app.components import COMPONENT_KINDS

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"
TORCH = "torch==2.13.0"
"""The torch release the project pins (scripts/test.sh, the Dockerfiles)."""


@dataclass(frozen=True)
class Role:
    """One host role: its extra, the components it runs, the libraries its install must neither hold nor load."""

    extra: str
    kinds: tuple[str, ...]
    forbidden: tuple[str, ...]
    also: tuple[str, ...] = ()
    """Requirements installed beside the extra (the center's pinned torch)."""


ROLES = {
    "broker": Role("broker", ("broker",), ("torch", "onnxruntime", "cv2", "av")),
    "edge": Role("edge", ("edge",), ("torch",)),
    "center": Role("center", ("worker", "stage-group"), (), also=(TORCH,)),
}


def _audit_code(kinds: tuple[str, ...], forbidden: tuple[str, ...]) -> str:
    """Python that imports the CLI and the runner of each kind, then prints the forbidden names it finds
    installed and loaded, as JSON."""
    runners = [COMPONENT_KINDS[kind].runner.split(":")[0] for kind in kinds]
    return (
        "import importlib, importlib.util, json, sys\n"
        "import vcascade.app.cli, vcascade.app.commands.component, vcascade.app.commands.check\n"
        f"for module in {runners!r}: importlib.import_module(module)\n"
        f"forbidden = {list(forbidden)!r}\n"
        "print(json.dumps({'installed': [m for m in forbidden if importlib.util.find_spec(m)],\n"
        "                  'loaded': [m for m in forbidden if m in sys.modules]}))\n"
    )


@pytest.mark.parametrize("role", ROLES, ids=str)
def test_each_role_entry_point_loads_none_of_its_forbidden_libraries(role):
    """In the full test environment: a new import of torch on the broker's or the edge's path fails here first."""
    spec = ROLES[role]
    code = _audit_code(spec.kinds, spec.forbidden)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=180).stdout
    assert json.loads(out)["loaded"] == [], f"{role}: {out}"


def test_every_command_names_an_extra_that_pyproject_declares():
    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {command.extra for command in COMMANDS.values()} - {None}
    assert named and named <= declared, named - declared
    assert {spec.extra for spec in ROLES.values()} <= declared


ENTRY_POINTS = {
    "broker": ["vcascade.app.cli", "vcascade.app.commands.component", "vcascade.app.commands.check",
               "vcascade.app.commands.status", "vcascade.app.commands.ui", "vcascade.app.commands.camera",
               "vcascade.app.commands.keys", "vcascade.app.commands.prometheus_config", "vcascade.broker.server"],
    "edge": ["vcascade.edge.process", "vcascade.app.commands.quantize", "vcascade.app.commands.search",
             "vcascade.app.ui.history_api"],
    "center": ["vcascade.center.worker", "vcascade.center.stage_group", "vcascade.app.commands.plan"],
    "all": ["vcascade.app.commands.run", "vcascade.app.preflight"],
}  # fmt: skip
"""The modules each install runs from: the CLI and its base commands (every role has them), then each role's
runner (``COMPONENT_KINDS``, resolved by name), the commands of its extra, and the deep checks (``check --deep``)."""
EXTRA_OF = {"broker": [], "edge": ["edge"], "center": ["center"], "all": ["all"]}
CONDITIONAL_IMPORTS = {
    ("vcascade.core.runtime.threads", "torch"): "only given torch threads (workers, stage groups); edges pass None",
}
"""Imports a role's path holds but never runs in that role, each with the reason."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extras: list[str]) -> set[str]:
    """The distributions the base install and ``extras`` declare in pyproject.toml (self-references followed)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found, todo, seen = set(), [None, *extras], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in project["dependencies"] if extra is None else project["optional-dependencies"][extra]:
            req = Requirement(requirement)
            if _normalized(req.name) == "vcascade":
                todo.extend(req.extras)
            else:
                found.add(_normalized(req.name))
    return found


def _with_requirements(distributions: set[str]) -> set[str]:
    """``distributions`` and everything they require, read from this environment's installed metadata."""
    found, todo = set(), list(distributions)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # declared for another platform (onnxruntime beside onnxruntime-gpu)
        for requirement in requires:
            req = Requirement(requirement)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_normalized(req.name))
    return found


def _third_party_imports(modules: dict[str, Path], reached: set[str]) -> dict[str, set[str]]:
    """Top-level name of every non-standard-library import of the ``reached`` modules -> the modules importing it."""
    found: dict[str, set[str]] = {}
    for module in reached:
        for node in ast.walk(ast.parse(modules[module].read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", "vcascade"):
                    found.setdefault(top, set()).add(module)
    return found


@pytest.mark.parametrize("role", ENTRY_POINTS, ids=str)
def test_every_library_a_roles_path_imports_is_declared_for_that_role(role):
    """Read from the source (every import statement, function bodies included): each third-party import reachable
    from the role's entry points comes with the base install, the role's extra or what those require. A new
    ``import scipy`` at the edge without ``scipy`` in its extra, or a broker module importing OpenCV, fails here
    without installing anything."""
    modules, graph = source_modules(), import_graph()
    roots = [m for r in ("broker", *([role] if role != "broker" else [])) for m in ENTRY_POINTS[r]]
    reached, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            parts = module.split(".")
            todo += [*graph[module], *(".".join(parts[:i]) for i in range(1, len(parts)))]
    allowed = _with_requirements(_declared(EXTRA_OF[role]))
    owners = importlib.metadata.packages_distributions()
    wrong = []
    for top, importers in sorted(_third_party_imports(modules, reached).items()):
        dists = {_normalized(d) for d in owners.get(top, [])}
        importers = {m for m in importers if (m, top) not in CONDITIONAL_IMPORTS}
        if importers and not dists & allowed:
            wrong.append(f"{top} ({', '.join(sorted(dists)) or 'not installed'}) imported by {sorted(importers)}")
    assert not wrong, f"{role}: imports outside its install:\n" + "\n".join(wrong)


# ---- each role in its own environment -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def role_wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built once per session from a copy of what the Dockerfiles copy."""
    root = tmp_path_factory.mktemp("role-wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in ("vcascade", "edge", "broker", "center"):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "dist"), str(src)], check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = (root / "dist").glob("vcascade-*.whl")
    return wheel


@pytest.fixture(scope="session")
def role_env(tmp_path_factory, role_wheel):
    """A function returning the ``bin/`` folder of a role's own virtual environment, made on first use."""
    made: dict[str, Path] = {}

    def env(role: str) -> Path:
        if role not in made:
            venv = tmp_path_factory.mktemp(f"venv-{role}")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            spec = ROLES[role]
            proc = subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 "--no-compile", *spec.also, f"{role_wheel}[{spec.extra}]"],
                capture_output=True, text=True, timeout=1500,
            )  # fmt: skip
            assert proc.returncode == 0, f"pip install vcascade[{spec.extra}]:\n{proc.stderr[-3000:]}"
            made[role] = venv / "bin"
        return made[role]

    return env


def _vcascade(bin_dir: Path, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / "vcascade"), *args], capture_output=True, text=True, cwd=bin_dir,
                          timeout=timeout_s)  # fmt: skip


@pytest.mark.installs
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("role", ROLES, ids=str)
def test_each_role_installs_and_runs_help_and_check_without_its_forbidden_libraries(role, role_env):
    bin_dir = role_env(role)
    spec = ROLES[role]
    out = subprocess.run([str(bin_dir / "python"), "-c", _audit_code(spec.kinds, spec.forbidden)],
                         capture_output=True, text=True, cwd=bin_dir, timeout=180)  # fmt: skip
    # (cwd: not the checkout, whose vcascade/ folder would shadow the installed package)
    assert out.returncode == 0, out.stderr  # every module of the role's path imports in its own install
    assert json.loads(out.stdout) == {"installed": [], "loaded": []}
    for kind in spec.kinds:
        proc = _vcascade(bin_dir, kind, "--help")
        assert proc.returncode == 0 and "--config" in proc.stdout, proc.stderr
    proc = _vcascade(bin_dir, "check", str(DEMO))
    assert proc.returncode == 0 and ": OK (" in proc.stdout, proc.stderr


@pytest.mark.installs
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("role", "command", "extra", "code"),
    [("broker", "worker", "center", 3), ("broker", "edge", "edge", 3), ("broker", "plan", "center", 1),
     ("broker", "run", "all", 1), ("edge", "worker", "center", 3)],
)  # fmt: skip
def test_a_command_of_another_role_names_the_extra_to_install_in_one_line(role, command, extra, code, role_env):
    demo = yaml.safe_load(DEMO.read_text())
    section = {"worker": "workers", "edge": "edges"}.get(command)
    args = ["--config", str(DEMO), "--name", next(iter(demo[section]))] if section else [str(DEMO)]
    proc = _vcascade(role_env(role), command, *args)
    assert proc.returncode == code, proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"vcascade {command}: this install lacks ") and f"pip install 'vcascade[{extra}]'" in line


@pytest.mark.installs
@pytest.mark.timeout(1800)
def test_a_broker_forwards_an_roi_and_its_result_in_the_broker_install(role_env, tmp_path, free_port):
    """Not just imports: a real ``vcascade broker`` of the broker install, in an environment that holds no torch,
    ONNX Runtime, OpenCV or PyAV to load by accident at run time, carries one ROI from an edge to a worker and its
    result back, then stops on SIGTERM with exit code 0 and that result in its final snapshot."""
    bin_dir = role_env("broker")
    ports = [free_port(), free_port(), free_port()]
    config = tmp_path / "broker.yaml"
    config.write_text(yaml.safe_dump(deployment_data("broker-role", ports, queue_max=100)))
    proc = subprocess.Popen([str(bin_dir / "vcascade"), "broker", "--config", str(config), "--name", "broker-role"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=bin_dir)  # fmt: skip
    context = zmq.Context.instance()
    worker = make_socket(context, zmq.DEALER, identity="worker-role")
    edge = make_socket(context, zmq.DEALER, identity="edge-role")
    try:
        worker.connect(f"tcp://127.0.0.1:{ports[1]}")
        edge.connect(f"tcp://127.0.0.1:{ports[0]}")
        worker.send(wire.encode(wire.Ready(worker="worker-role", credits=1, recognizer="embed")))
        send_roi(edge, "roi-role")
        got = recv(worker, timeout_s=120)  # the broker's start in a fresh environment, on a loaded machine
        assert got is not None and proc.poll() is None, proc.stderr.read()[-3000:] if proc.poll() is not None else ""
        assert isinstance(got[0], wire.Roi) and got[0].roi_id == "roi-role"
        answer(worker, got[0])
        result = recv(edge, timeout_s=60)
        assert result is not None and isinstance(result[0], wire.Result) and result[0].roi_id == "roi-role"
    finally:
        worker.close(linger=0)
        edge.close(linger=0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    final = json.loads(out)
    assert (final["final"], final["forwarded"], final["results"]) == (True, 1, 1), final

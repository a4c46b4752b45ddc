"""The ``vcascade`` command: ``--version``, ``--help`` from the command table, and a command that loads only
its own module (``vcascade check`` loads no torch, OpenCV or ONNX Runtime)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import vcascade
from vcascade.app.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo.yaml"
COMMAND_MODULES = "vcascade.app.commands."
HEAVY = {"torch", "cv2", "onnxruntime"}
PROBE = """
import json, sys
from vcascade.app.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("loaded:", json.dumps(sorted(sys.modules)))
sys.exit(code)
"""


def run_main(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``main(args)`` in a fresh interpreter; the process and the modules it had loaded at the end."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    out, _, loaded = done.stdout.rpartition("loaded: ")
    return subprocess.CompletedProcess(done.args, done.returncode, out, done.stderr), set(json.loads(loaded))


def test_version_prints_the_package_version_and_exits_0():
    done = subprocess.run([sys.executable, "-m", "vcascade", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"vcascade {vcascade.__version__}\n" == "vcascade 0.1.0\n"


def test_help_lists_every_command_of_the_table_without_importing_them():
    done, loaded = run_main("--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for name, command in COMMANDS.items():
        assert f"{name} {command.help}" in text
    assert not {m for m in loaded if m.startswith(COMMAND_MODULES)}
    assert not HEAVY & loaded


def test_check_loads_its_own_command_module_only():
    done, loaded = run_main("check", DEMO)
    assert done.returncode == 0, done.stderr
    assert {m for m in loaded if m.startswith(COMMAND_MODULES)} == {COMMAND_MODULES + "check"}
    assert not HEAVY & loaded


def test_usage_errors_name_the_command_and_exit_2():
    done, loaded = run_main("check")
    assert done.returncode == 2
    assert "vcascade check: error: the following arguments are required: file" in done.stderr
    unknown, loaded = run_main("chekc", DEMO)
    assert unknown.returncode == 2 and "invalid choice: 'chekc'" in unknown.stderr
    assert not {m for m in loaded if m.startswith(COMMAND_MODULES)}

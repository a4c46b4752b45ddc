"""The line naming the extra to install when a command's library is missing (vcascade/core/extras.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vcascade.core.extras import missing_extra

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"


def test_a_missing_library_of_an_extra_names_the_commands_extra():
    line = missing_extra(ModuleNotFoundError("No module named 'cv2'", name="cv2"), "edge", "edge")
    assert line == ("vcascade edge: this install lacks opencv-python (module 'cv2'); "
                    "install the 'edge' extra: pip install 'vcascade[edge]'")  # fmt: skip


def test_a_base_command_needing_a_library_names_all():
    """``vcascade check --deep`` is a base command that loads every role's libraries."""
    line = missing_extra(ModuleNotFoundError(name="onnxruntime.capi"), "check", None)
    assert line is not None and line.endswith("pip install 'vcascade[all]'")


@pytest.mark.parametrize("name", ["vcascade.edge.gone", "yaml", "no_such_module", None])
def test_a_module_no_extra_provides_is_not_explained_away(name):
    """A broken install (a base library or a module of the package missing) keeps its traceback."""
    assert missing_extra(ModuleNotFoundError(name=name), "edge", "edge") is None


@pytest.mark.parametrize(("blocked", "argv", "code", "extra"), [
    ("torch", ["plan", str(DEMO)], 1, "center"),
    ("av", ["edge", "--config", str(DEMO), "--name", "edge-1"], 3, "edge"),
])  # fmt: skip
def test_the_cli_prints_one_line_and_no_traceback(blocked, argv, code, extra):
    """In the full environment, with the library made unimportable in that process (``sys.modules[name] = None``
    makes Python's import raise ModuleNotFoundError, as in an install without it); tests/deploy/test_role_installs.py
    does the same in real per-role installs."""
    script = f"import sys; sys.modules[{blocked!r}] = None\nfrom vcascade.app.cli import main\nsys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert proc.returncode == code, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"lacks {blocked}" in line and line.endswith(f"pip install 'vcascade[{extra}]'")

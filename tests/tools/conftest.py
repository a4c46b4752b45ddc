"""Fixtures for the tests of tools/: running a benchmark's ``--quick`` setting as CI does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_quick(models_dir: Path, tmp_path: Path) -> Callable[[str, int], tuple[str, dict[str, Any]]]:
    """``run_quick(script, timeout_s)``: run ``python -m tools.<script> --quick`` with the test models and a JSON output;
    returns its stdout and the JSON it wrote (the test fails with its stderr when it exits non-zero)."""

    def run(script: str, timeout_s: int) -> tuple[str, dict[str, Any]]:
        out = tmp_path / f"{script}.json"
        proc = subprocess.run(
            [sys.executable, "-m", f"tools.{script}", "--quick", "--model-dir", str(models_dir),
             "--json", str(out)],
            capture_output=True, text=True, timeout=timeout_s, check=False, cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout, json.loads(out.read_text())

    return run

"""``vcascade prometheus-config --rule-file`` writes rule paths Prometheus resolves (issue 27): Prometheus reads a
relative ``rule_files`` entry against its config file's folder, so a path given relative to the current folder
failed ``promtool check config``. Checked with the real promtool (Debian package ``prometheus``, installed by
scripts/test.sh) run from another folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ALERTS = "configs/prometheus/alerts.yml"

pytestmark = pytest.mark.timeout(300)


def _vcascade(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcascade", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def _promtool_check(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install the Debian package prometheus (scripts/test.sh does)")
    return subprocess.run([promtool, "check", "config", str(config)], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_a_relative_rule_file_is_written_relative_to_the_output_and_passes_promtool(tmp_path):
    out = tmp_path / "prometheus" / "prometheus.yml"
    out.parent.mkdir()
    gen = _vcascade("prometheus-config", "configs/demo.yaml", "--rule-file", ALERTS, "-o", str(out), cwd=REPO)
    assert gen.returncode == 0, gen.stderr
    [rule] = yaml.safe_load(out.read_text())["rule_files"]
    assert not Path(rule).is_absolute() and (out.parent / rule).resolve() == (REPO / ALERTS).resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = _promtool_check(out, cwd=elsewhere)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 1 rule files found" in check.stdout + check.stderr


def test_on_stdout_the_rule_file_is_absolute_and_passes_promtool(tmp_path):
    gen = _vcascade("prometheus-config", "configs/demo.yaml", "--rule-file", ALERTS, cwd=REPO)
    assert gen.returncode == 0, gen.stderr
    assert yaml.safe_load(gen.stdout)["rule_files"] == [str((REPO / ALERTS).resolve())]
    config = tmp_path / "prometheus.yml"
    config.write_text(gen.stdout)
    check = _promtool_check(config, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_missing_rule_file_is_an_error_naming_it(tmp_path):
    gen = _vcascade("prometheus-config", "configs/demo.yaml", "--rule-file", "nope.yml", "-o",
                    str(tmp_path / "p.yml"), cwd=REPO)  # fmt: skip
    assert (gen.returncode, gen.stderr) == (2, "vcascade prometheus-config: --rule-file nope.yml: no such file\n")
    assert not (tmp_path / "p.yml").exists()

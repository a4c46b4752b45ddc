"""Every benchmark of tools/ in a short form, so one that breaks fails the suite (issue 32): each runs as its
command line runs it, on a small setting, and the test checks what holds on any host (the run ends, its report
has every part, counts balance, ratios are the quotients they claim to be), never a speed: the figures themselves
are in docs/BENCHMARKS.md. The benchmarks with a ``--quick`` form have their own tests beside this file
(bench_ingest, bench_match, bench_reid, bench_scale); bench_center's deployment is in test_bench_center.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_tool(*args: str, timeout_s: int = 300) -> subprocess.CompletedProcess:
    """``python -m tools.<args>`` from the repository root, as docs/BENCHMARKS.md runs it."""
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout_s,
                          cwd=REPO, check=False)  # fmt: skip


def test_bench_routing_prints_each_workload_against_any():
    proc = run_tool("tools.bench_routing", "--rois", "400", "--reps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split(":")[0].strip(): line for line in proc.stdout.splitlines()}
    assert set(lines) == {"any", "routed", "absent"}
    assert "1.00 x any" in lines["any"]


def test_bench_broker_compares_the_broker_with_zmq_proxy():
    proc = run_tool("tools.bench_broker", "--seconds", "0.3", "--reps", "1", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    tp = res["throughput"]
    assert tp["proxy"]["cpu_us_per_roi"] > 0 and tp["broker"]["cpu_us_per_roi"] > 0
    assert res["ratio"] > 0


def test_bench_analytics_reports_the_cost_ratio_and_its_verdict(tmp_path, models_dir):
    out = tmp_path / "analytics.json"
    proc = run_tool("tools.bench_analytics", "--model-dir", str(models_dir), "--frames", "20",
                    "--synthetic-tracks", "10", "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["lines"] == 10 and result["zones"] == 10 and result["synthetic"]["frames"] > 0
    assert result["within_goal"] == (result["video"]["ratio"] <= result["goal_ratio"])
    assert proc.returncode == (0 if result["within_goal"] else 1), proc.stderr[-3000:]


@pytest.mark.timeout(900)
def test_bench_runs_calibration_baseline_and_both_cascades_and_balances_their_books(tmp_path, models_dir):
    """The headline benchmark (tools/bench.py), one camera of 20 frames: the calibration and the baseline as child
    processes, both cascades through ``vcascade run``, the report and its plot."""
    out = tmp_path / "bench"
    proc = run_tool("tools.bench", "--model-dir", str(models_dir), "--cameras", "1", "--frames", "20", "--cores", "2",
                    "--sections", "calibrate,baseline,cascade", "--out", str(out), timeout_s=840)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "bench.json").read_text())
    assert report["baseline"]["frames"] == 20 and report["baseline"]["rois"] > 0
    for policy in ("track", "every_detection"):
        run = report["cascade"][policy]
        assert run["frames"] == 20 and run["sent"] > 0
        assert run["sent"] == run["results"] + run["drops"]  # every ROI answered or dropped, counted
    assert report["cascade"]["track"]["sent"] <= report["cascade"]["every_detection"]["sent"]
    assert (out / "bench.png").stat().st_size > 10_000

"""tools/bench_history.py in its ``--quick`` form: the run ends, its report has every part, and its ratio is the
quotient of its two rates (the figures are in docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_bench_history_quick_reports_write_ratio_query_latency_and_disk(tmp_path):
    out = tmp_path / "history.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench_history", "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    write = res["write"]
    assert res["rows"] == 20_000
    assert write["ratio"] == pytest.approx(write["ours_rows_per_s"] / write["bare_rows_per_s"])
    assert set(res["queries"]) == {"identity_timeline", "camera_hour", "event_line_day"}
    for lat in res["queries"].values():
        assert 0 < lat["p50_ms"] <= lat["p95_ms"]
    disk = res["disk_per_1000_results_with_evidence"]
    assert disk["image_bytes"] > 0 and disk["total_bytes"] == pytest.approx(disk["image_bytes"] + disk["database_bytes"])
    assert "x bare (goal >= 0.8)" in proc.stdout and "disk per 1,000 results with evidence" in proc.stdout

"""tools/bench_geometry.py --quick: the largest geometry the limits allow validates and runs (issue 28, item 9).
The speed itself is the benchmark's to report (docs/BENCHMARKS.md), never asserted here."""

from __future__ import annotations


def test_quick_run_measures_the_largest_geometry_allowed(run_quick):
    from vcascade.core.schema.analytics import MAX_CORNERS

    stdout, result = run_quick("bench_geometry", 240)
    assert result["corners"] == MAX_CORNERS
    assert result["check_s"] > 0 and result["frame_ms"] > 0
    assert "check_s " in stdout and "frame_ms " in stdout

"""tools/bench_ingest.py --sections decode --quick: every decode path on the same clips, in one run; the goal decided
on CPU time per frame."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench_ingest import median_interval, repetition_order, verdict

REPO = Path(__file__).resolve().parents[2]
PATHS = ("bare", "handoff", "reader", "opencv", "opencv_1t")


def test_quick_decode_section_reports_every_path_with_wall_and_cpu_ratios():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench_ingest", "--sections", "decode", "--quick", "--reps", "1",
         "--json"], capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    decode = json.loads(proc.stdout)["decode"]
    assert decode["video"] == "bikes.mp4" and decode["reps"] == 1 and decode["load_after"] >= 0
    clips = decode["clips"]
    assert [c["frames"] for c in clips] == [500, 250, 250]  # bikes.mp4 twice; once at 320x180; once at 64x48
    assert "320x180" in clips[1]["clip"]
    for clip in clips:
        for path in PATHS:  # the reader ended cleanly, nothing lost, with the frame count of every other path
            assert len(clip[f"{path}_fps"]) == 1 and clip[f"{path}_fps_best"] >= clip[f"{path}_fps_median"] > 0
            assert clip["cpu_ms_per_frame"][path] > 0 and clip["page_faults_per_frame"][path] >= 0
        for ratio in ("ratio", "ratio_best", "ratio_paired", "ratio_opencv", "ratio_handoff", "handoff_ratio", "cpu_ratio",
                      "cpu_ratio_paired", "cpu_handoff_ratio"):
            assert 0 < clip[ratio] < 10
        # the ratio of the unrounded medians, to 3 decimals; the medians are printed to 0.1 frames/s
        assert clip["ratio"] == pytest.approx(clip["reader_fps_median"] / clip["bare_fps_median"], abs=1e-3)
        low, high = clip["ratio_paired_ci"]  # one repetition: the interval is that one ratio
        assert low == high == clip["ratio_paired"]
        assert clip["cpu_ratio_paired_ci"][0] == clip["cpu_ratio_paired_ci"][1] == clip["cpu_ratio_paired"]
    for clip in clips[:2]:  # the goal is decided on CPU time per frame
        assert clip["goal"] == ("met" if clip["cpu_ratio_paired"] >= 0.95 else "missed")
    assert clips[2]["goal"] is None  # the tiny clip measures per-frame costs


def test_the_median_interval_and_the_verdict():
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_interval([float(v) for v in range(100)]) == (39.0, 60.0)  # ranks 40 and 61 of 100
    assert verdict((0.95, 0.99)) == "met" and verdict((0.90, 0.949)) == "missed" and verdict((0.9, 0.96)) == "undecided"
    # the paths compared run back to back, the order reversed every other repetition
    assert repetition_order(0)[:3] == ["bare", "handoff", "reader"] and repetition_order(1)[:3] == ["reader", "handoff", "bare"]

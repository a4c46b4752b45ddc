"""tools/bench.py's arithmetic: the compute floor (one-thread and contended costs) and the edge's overhead."""

from __future__ import annotations

import pytest

from tools.bench import BASELINE_STEPS, CASCADE_STEPS, edge_cpu_per_frame, floor_fps

CAL = {
    "per_frame_ms": {"decode": 1.0, "detect": 20.0, "track": 1.0},
    "per_roi_ms": {"encode": 0.5, "prep": 1.0, "recog": 10.0, "head": 0.5},
    "contended_ms": {"detect": 30.0, "recog": 12.0},
}


def test_floor_is_frames_over_their_cpu_seconds_per_core():
    # cascade: 100 frames x 22 ms + 50 ROIs x 12 ms = 2.8 s of CPU; on 2 cores 1.4 s -> 71.4 frames/s
    assert floor_fps(CAL, 100, 50, 2, CASCADE_STEPS) == pytest.approx(100 / 1.4)
    # the baseline neither tracks nor encodes: 100 x 21 + 50 x 11.5 = 2.675 s
    assert floor_fps(CAL, 100, 50, 2, BASELINE_STEPS) == pytest.approx(100 / 1.3375)
    # contended: detect 30 and recog 12 -> 100 x 32 + 50 x 14 = 3.9 s
    assert floor_fps(CAL, 100, 50, 2, CASCADE_STEPS, contended=True) == pytest.approx(100 / 1.95)
    assert floor_fps(CAL, 0, 0, 2, CASCADE_STEPS) == 0.0


def test_edge_overhead_is_its_running_cpu_against_its_steps():
    run = {"frames": 100, "sent": 20, "edge": {"cpu_s": 2.42}}  # 24.2 ms per frame
    got = edge_cpu_per_frame(run, CAL)  # steps: 1 + 20 + 1 + 0.5 x 20 / 100 = 22.1 ms
    assert got["steps_ms"] == pytest.approx(22.1)
    assert got["measured_ms"] == pytest.approx(24.2)
    assert got["overhead"] == pytest.approx(24.2 / 22.1 - 1)

"""tools/bench.py's arithmetic: the compute floor (one-thread and contended costs) and the edge's overhead."""

from __future__ import annotations

import pytest

from tools.bench import BASELINE_STEPS, CASCADE_STEPS, edge_cpu_per_frame, floor_fps

CAL = {
    "per_frame_ms": {"decode": 1.0, "detect": 20.0, "track": 1.0, "gate": 0.25},
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
    run = {"frames": 100, "detected": 100, "sent": 20, "edge": {"cpu_s": 2.42}}  # 24.2 ms per frame
    got = edge_cpu_per_frame(run, CAL)  # steps: 1 + 20 + 1 + 0.5 x 20 / 100 = 22.1 ms
    assert got["steps_ms"] == pytest.approx(22.1)
    assert got["measured_ms"] == pytest.approx(24.2)
    assert got["overhead"] == pytest.approx(24.2 / 22.1 - 1)


def test_a_gated_edge_is_charged_detection_on_the_frames_detected_and_the_gate_on_every_frame():
    # 100 frames, 25 detected: 100 x (1 + 1 + 0.25) + 25 x 20 + 50 x 12 = 1.325 s of CPU; on 2 cores -> 150.9 fps
    assert floor_fps(CAL, 100, 50, 2, (*CASCADE_STEPS, "gate"), detected=25) == pytest.approx(100 / 0.6625)
    # contended: detection at 30 ms on the 25 frames detected, recognition at 12 -> 225 + 750 + 700 = 1.675 s
    assert floor_fps(CAL, 100, 50, 2, (*CASCADE_STEPS, "gate"), contended=True, detected=25) == pytest.approx(
        100 / 0.8375)
    # an ungated run is charged no gate, whatever the calibration measured
    assert floor_fps(CAL, 100, 50, 2, CASCADE_STEPS, detected=100) == pytest.approx(100 / 1.4)
    run = {"frames": 100, "detected": 25, "sent": 20, "edge": {"cpu_s": 1.0}}
    assert edge_cpu_per_frame(run, CAL, gated=True)["steps_ms"] == pytest.approx(1 + 5 + 1 + 0.25 + 0.1)

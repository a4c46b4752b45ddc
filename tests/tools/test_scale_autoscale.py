"""tools/scale_autoscale.py: the day/night curve and KEDA's scaling rule (pure functions, no processes); the
day/night mode end to end is in tests/tools/test_bench_scale.py."""

from __future__ import annotations

import pytest

from tools.scale_autoscale import DAY_NIGHT, ControllerTimes, ScaleDownGate, keda_replicas, load_share


def test_day_night_curve_is_night_then_peak_then_night_linear_between_points():
    assert load_share(DAY_NIGHT, 0.0) == 0.2 and load_share(DAY_NIGHT, 0.5) == 1.0 and load_share(DAY_NIGHT, 1.0) == 0.2
    assert load_share(DAY_NIGHT, 0.25) == pytest.approx(0.6)  # half way up the morning ramp
    assert load_share([(0.0, 0.5), (1.0, 0.5)], 2.0) == 0.5


def test_replicas_are_the_backlog_over_the_threshold_rounded_up_and_bounded():
    assert keda_replicas(97, threshold=96, current=3, min_replicas=1, max_replicas=8) == 2
    assert keda_replicas(0, threshold=96, current=3, min_replicas=1, max_replicas=8) == 1
    assert keda_replicas(10_000, threshold=96, current=3, min_replicas=1, max_replicas=8) == 8
    with pytest.raises(ValueError, match="threshold"):
        keda_replicas(10, threshold=0, current=1, min_replicas=1, max_replicas=2)


def test_replicas_stay_while_the_metric_is_within_the_hpa_tolerance():
    assert keda_replicas(2 * 96 * 1.09, threshold=96, current=2, min_replicas=1, max_replicas=8) == 2
    assert keda_replicas(2 * 96 * 1.11, threshold=96, current=2, min_replicas=1, max_replicas=8) == 3


def test_scale_up_is_at_once_and_scale_down_waits_out_the_window_one_pod_per_period():
    gate = ScaleDownGate(window_s=20.0, pods_per_period=1, period_s=8.0)
    assert gate.apply(0.0, current=1, recommended=3) == 3
    assert gate.apply(10.0, current=3, recommended=1) == 3  # 3 recommended 10 s ago, within the window
    assert gate.apply(20.0, current=3, recommended=1) == 3
    assert gate.apply(21.0, current=3, recommended=1) == 2  # window passed: one pod ...
    assert gate.apply(25.0, current=2, recommended=1) == 2  # ... per period
    assert gate.apply(29.0, current=2, recommended=1) == 1


def test_controller_times_are_the_scaled_objects_compressed():
    times = ControllerTimes.from_scaled_object(speedup=15.0)
    assert (times.min_replicas, times.polling_s, times.window_s, times.pods_per_period, times.period_s) == (
        1, 1.0, 20.0, 1, 8.0)  # fmt: skip

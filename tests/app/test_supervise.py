"""The restart-storm policy (vcascade/app/supervise.py): backoff doubling, the sliding window, giving up."""

from __future__ import annotations

import pytest

from vcascade.app.supervise import RestartPolicy, RestartTracker
from vcascade.core.config import Deployment
from vcascade.core.schema import SupervisionConfig


def test_backoff_doubles_within_the_window_and_is_capped():
    tracker = RestartTracker(RestartPolicy(max_restarts=10, window_s=60, backoff_initial_s=0.5, backoff_max_s=3))
    delays = [tracker.on_exit(float(t)) for t in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert tracker.restarts == 5 and not tracker.gave_up


def test_more_than_max_restarts_within_the_window_gives_up_for_good():
    tracker = RestartTracker(RestartPolicy(max_restarts=3, window_s=60, backoff_initial_s=0, backoff_max_s=0))
    assert [tracker.on_exit(t) for t in (0.0, 1.0, 2.0)] == [0.0, 0.0, 0.0]
    assert tracker.on_exit(3.0) is None
    assert tracker.gave_up and tracker.restarts == 3
    assert tracker.on_exit(1000.0) is None  # a storm stops the component; time does not revive it


def test_restarts_older_than_the_window_no_longer_count():
    tracker = RestartTracker(RestartPolicy(max_restarts=2, window_s=10, backoff_initial_s=1, backoff_max_s=8))
    assert tracker.on_exit(0.0) == 1
    assert tracker.on_exit(5.0) == 2
    assert tracker.on_exit(12.0) == 2  # the exit at 0 s left the window: one recent restart, one doubling
    assert tracker.on_exit(14.0) is None  # 5 s and 12 s are within 10 s of 14 s
    assert tracker.restarts == 3


def test_zero_restarts_means_the_first_crash_stops_the_component():
    tracker = RestartTracker(RestartPolicy(max_restarts=0))
    assert tracker.on_exit(0.0) is None and tracker.gave_up


@pytest.mark.parametrize(
    "kwargs", [{"max_restarts": -1}, {"window_s": 0}, {"backoff_initial_s": -1}, {"backoff_initial_s": 5, "backoff_max_s": 1}]
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RestartPolicy(**kwargs)


def test_deployment_has_supervision_defaults_and_forbids_unknown_keys():
    assert Deployment.model_fields["supervision"].default == SupervisionConfig()
    cfg = SupervisionConfig(max_restarts=2, window_s=30)
    assert (cfg.max_restarts, cfg.window_s, cfg.backoff_initial_s) == (2, 30, 0.5)
    with pytest.raises(ValueError):
        SupervisionConfig(restarts=3)

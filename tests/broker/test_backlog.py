"""The backlog a broker announces to edges: mean recent queue wait, 0 when nothing is queued, peers' numbers clamped."""

from __future__ import annotations

import math

import pytest

from vcascade.broker.backlog import EWMA_WEIGHT, MAX_REPORTED_MS, QueueBacklog, finite_ms


def test_backlog_follows_the_recent_waits_and_is_zero_when_nothing_is_queued():
    backlog = QueueBacklog()
    assert backlog.backlog_ms(queued=5) == 0.0
    backlog.waited(1.0)
    assert backlog.backlog_ms(queued=5) == pytest.approx(EWMA_WEIGHT * 1000.0)
    for _ in range(200):
        backlog.waited(0.5)
    assert backlog.backlog_ms(queued=5) == pytest.approx(500.0, rel=1e-3)
    assert backlog.backlog_ms(queued=0) == 0.0


@pytest.mark.parametrize(("value", "expected"), [(math.nan, 0.0), (-5.0, 0.0), (math.inf, MAX_REPORTED_MS), (12.5, 12.5)])
def test_a_peers_number_is_clamped(value, expected):
    assert finite_ms(value) == expected

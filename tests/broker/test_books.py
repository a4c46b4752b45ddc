"""The pure helpers around the broker loop: the per-ROI deadline and hop arithmetic, send-failure reasons."""

from __future__ import annotations

import errno

import pytest
import zmq

from vcascade.broker.books import MIN_TTL_MS, broker_hops, remaining_ttl_ms, send_failure_reason
from vcascade.broker.dispatch import InFlight, Pending


def _flight(received_s: float, dispatched_s: float, ttl_ms: float) -> InFlight:
    return InFlight(Pending("r", "cam", received_s, ttl_ms), worker=b"w", dispatched_s=dispatched_s)


def test_remaining_ttl_takes_the_queue_wait_off_and_never_reaches_zero():
    assert remaining_ttl_ms(_flight(10.0, 10.25, ttl_ms=1000.0)) == pytest.approx(750.0)
    assert remaining_ttl_ms(_flight(10.0, 11.0, ttl_ms=1000.0)) == MIN_TTL_MS  # 0 would mean "no deadline"


def test_broker_hops_split_queue_wait_and_transit():
    hops = broker_hops(_flight(1.0, 1.5, 0.0), [("stage0", 100.0), ("head", 50.0)], now_s=1.7)
    assert [name for name, _ in hops] == ["broker_queue", "transit_broker_worker"]
    assert hops[0][1] == pytest.approx(500.0) and hops[1][1] == pytest.approx(50.0)
    assert broker_hops(_flight(1.0, 1.5, 0.0), [("stage0", 300.0)], now_s=1.7)[1][1] == 0.0  # clamped


def test_send_failure_reasons():
    assert send_failure_reason(zmq.ZMQError(errno.EHOSTUNREACH)) == "unreachable"
    assert send_failure_reason(zmq.Again()) == "hwm"
    assert send_failure_reason(zmq.ZMQError(errno.EINVAL)) == "error"

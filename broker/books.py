"""What the broker keeps per ROI and counts per run, and the small calculations on them (no sockets, no clock).

* :class:`Envelope`: the routing id and frames of a queued ROI, forwarded as received.
* :class:`Stats`: the run's counters behind the ``report`` dict (the accounting line of a broker), kept by
  :class:`vcascade.broker.metrics.BrokerTelemetry` in the same call that counts the metric.
* :func:`remaining_ttl_ms`: the deadline an ROI still has when dispatched (DESIGN.md, "Deadlines").
* :func:`send_failure_reason`: the metric reason of a send ZeroMQ refused.
"""

from __future__ import annotations

import collections
import errno
from dataclasses import dataclass, field

import zmq

from vcascade.broker.dispatch import InFlight
from vcascade.core.protocol import wire

MIN_TTL_MS = 0.001
"""Smallest ttl passed on, ms: ``ttl_ms == 0`` means "no deadline" on the wire, so an ROI with one keeps one."""


@dataclass(slots=True)
class Envelope:
    """What the broker keeps of a queued ROI.

    Attributes:
        edge: the edge's routing id on the frontend ROUTER.
        frames: ``[header, payload]`` exactly as received (payload forwarded zero-copy).
        roi: the decoded header, re-encoded with the remaining ``ttl_ms`` when the ROI has a deadline.
    """

    edge: bytes
    frames: list[zmq.Frame]
    roi: wire.Roi


@dataclass
class Stats:
    """Counters of one broker run (ROIs unless said otherwise); ``drops`` by reason (answers included)."""

    received: int = 0
    forwarded: int = 0
    results: int = 0
    worker_drops: int = 0
    malformed: int = 0
    redispatched: int = 0
    drops: collections.Counter[str] = field(default_factory=collections.Counter)

    def report(self, name: str, final: bool, *, workers: int, queued: int, in_flight: int) -> dict:
        """The ``report`` dict of :func:`vcascade.broker.server.run_broker` (counts plus the current occupancy)."""
        return {
            "component": "broker", "name": name, "final": final,
            "received": self.received, "forwarded": self.forwarded, "results": self.results,
            "worker_drops": self.worker_drops, "drops": dict(self.drops), "malformed": self.malformed,
            "redispatched": self.redispatched, "workers": workers, "queued": queued, "in_flight": in_flight,
        }  # fmt: skip


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1000.0


def broker_hops(flight: InFlight, worker_hops: list[wire.Hop], now_s: float) -> list[wire.Hop]:
    """The broker's hops of an answered ROI, ms: ``("broker_queue", received -> dispatched)`` and
    ``("transit_broker_worker", round trip to the worker minus the worker's own hops)``.

    Args:
        flight: the completed in-flight record (times in seconds on the broker's clock).
        worker_hops: the hops the worker reported, ms on its own clock.
        now_s: when the answer arrived, seconds on the broker's clock.

    The transit hop is clamped at 0: worker hops are measured on the worker's clock and may round up.
    """
    queue_ms = ms(flight.dispatched_s - flight.pending.received_s)
    worker_ms = sum(hop_ms for _, hop_ms in worker_hops)
    transit_ms = max(0.0, ms(now_s - flight.dispatched_s) - worker_ms)
    return [("broker_queue", queue_ms), ("transit_broker_worker", transit_ms)]


def remaining_ttl_ms(flight: InFlight) -> float:
    """What is left of an ROI's deadline when dispatched, ms: its ``ttl_ms`` less the wait in this broker's
    queue, at least :data:`MIN_TTL_MS`. Call only for ROIs with a deadline (``ttl_ms > 0``)."""
    waited_ms = ms(flight.dispatched_s - flight.pending.received_s)
    return max(MIN_TTL_MS, flight.pending.ttl_ms - waited_ms)


def send_failure_reason(exc: zmq.ZMQError) -> str:
    """Metric reason of a refused send: ``unreachable`` (peer gone; ROUTER_MANDATORY), ``hwm`` (its pipe is at
    the high-water mark, EAGAIN on a NOBLOCK send) or ``error`` (anything else)."""
    if exc.errno == errno.EHOSTUNREACH:
        return "unreachable"
    return "hwm" if exc.errno == errno.EAGAIN else "error"

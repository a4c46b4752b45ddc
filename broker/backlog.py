"""The broker's backlog, as edges are told it in heartbeats: how long ROIs wait here before dispatch.

``backlog_ms`` is an exponentially weighted mean of the queue waits of the ROIs leaving the queues (dispatched,
or dropped as stale: those waited their whole deadline), weight :data:`EWMA_WEIGHT` for the newest, and 0 while
nothing is queued (a queue that emptied has no backlog, whatever the last waits were). Edges compare it with
their deadline and lower what they send (:mod:`vcascade.edge.selection.degrade`). Pure: the caller passes the waits.
"""

from __future__ import annotations

import math

EWMA_WEIGHT = 0.05
"""Weight of the newest wait: the mean follows the last ~20 ROIs, a fraction of a second under overload."""

MAX_REPORTED_MS = 3_600_000.0
"""Largest wait reported or announced, ms (bounds what a peer's number can do here)."""


def finite_ms(value: float) -> float:
    """``value`` clamped to [0, :data:`MAX_REPORTED_MS`]; NaN is 0 (a peer's number, never trusted as is)."""
    return 0.0 if math.isnan(value) else min(max(value, 0.0), MAX_REPORTED_MS)


class QueueBacklog:
    """Mean recent queue wait, ms; see the module docstring."""

    def __init__(self) -> None:
        self._mean_ms = 0.0

    def waited(self, wait_s: float) -> None:
        """An ROI left the queues after ``wait_s`` seconds there (>= 0, on this broker's clock: never a peer's
        number, so only the upper bound is applied; once per ROI)."""
        self._mean_ms += EWMA_WEIGHT * (min(wait_s * 1000.0, MAX_REPORTED_MS) - self._mean_ms)

    def backlog_ms(self, queued: int) -> float:
        """What to announce with ``queued`` ROIs waiting now: the mean recent wait, 0 when none waits."""
        return self._mean_ms if queued else 0.0

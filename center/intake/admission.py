"""Deadline-aware admission at the worker: drop before compute the ROIs that cannot start compute in time.

An ROI's ``ttl_ms`` is how long it may still wait before compute (DESIGN.md, "Deadlines"). Checking it when
its micro-batch closes is not enough under overload: the micro-batch then waits behind the micro-batches
already queued for the first stage, and starts compute late; its results come back past the deadline, having
used the device for nothing (Clockwork, Gujarati et al., OSDI 2020: drop up front what cannot finish in time).

:class:`StartEstimate` predicts when a micro-batch closed now would start on the first stage:

    start delay = max(0, ahead - 0.5) x measured stage-0 time per micro-batch

``ahead``: micro-batches handed to the engine that stage 0 has not finished (the one computing counts half:
on average half of it is left); the stage-0 time is an exponentially weighted mean of the measured ones
(:data:`EWMA_WEIGHT` for the newest). An ROI whose remaining ``ttl_ms`` is shorter than the delay is dropped
as ``stale`` with the ones already past it. Pure, thread-safe (the batcher asks, the stage thread reports).
"""

from __future__ import annotations

import threading

EWMA_WEIGHT = 0.2
"""Weight of the newest stage-0 time in the mean (about the last 5 micro-batches)."""


class StartEstimate:
    """Micro-batches ahead of stage 0 and its measured time per micro-batch; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ahead = 0
        self._stage_s: float | None = None

    def submitted(self) -> None:
        """A micro-batch was handed to the engine (call before ``submit``, which may block)."""
        with self._lock:
            self._ahead += 1

    def first_stage_done(self, seconds: float | None) -> None:
        """Stage 0 finished (or failed: ``seconds`` None) a micro-batch; ``seconds`` is its compute time."""
        with self._lock:
            self._ahead = max(0, self._ahead - 1)
            if seconds is not None:
                old = self._stage_s
                self._stage_s = seconds if old is None else old + EWMA_WEIGHT * (seconds - old)

    def start_delay_ms(self) -> float:
        """Expected wait of a micro-batch closed now before stage 0 starts it, ms (0 before any measurement)."""
        with self._lock:
            if self._stage_s is None:
                return 0.0
            return max(0.0, self._ahead - 0.5) * self._stage_s * 1000.0

    @property
    def ahead(self) -> int:
        """Micro-batches handed over that stage 0 has not finished."""
        with self._lock:
            return self._ahead

"""Micro-batches at the worker: the unit of work that flows through the stages, how received ROIs are grouped into
one ("full or timeout"), and when a micro-batch closed now would start compute (deadline-aware admission).

**The unit of work**: ROI items (:class:`RoiItem`), grouped into a micro-batch (:class:`MicroBatch`) that flows
through the stages. Every timestamp is ``time.perf_counter()`` seconds on this host (monotonic). The latency
account of an ROI is built from consecutive differences of its timestamps, so its hops sum exactly to the worker's
hold time:

=============  ==========================================================================
hop            interval
=============  ==========================================================================
batch_wait     ROI received by the IO thread -> its micro-batch closed
preprocess     micro-batch closed -> input tensor ready on the first stage's device
stage<k>       previous stage done (or tensor ready) -> stage k output ready (incl. queue wait)
link           remote stage group: sent -> answer received, less the group's compute (both directions)
head           last stage done -> result built
=============  ==========================================================================

**Full or timeout** (:class:`MicroBatcher`): a micro-batch closes when it holds ``max_batch`` ROIs, or
``max_wait_ms`` after its first ROI was received, whichever comes first (the policy of DeepStream's stream muxer:
``batch-size`` / ``batched-push-timeout``). ROIs already waiting when the timeout expires are still taken, up to
``max_batch``, so a backlog is cleared in full batches. What happens to a closed micro-batch before compute (stale
ROIs, crop decode, resize, normalisation) is :mod:`vcascade.center.intake.preprocess`.

**Deadline-aware admission** (:class:`StartEstimate`): an ROI's ``ttl_ms`` is how long it may still wait before
compute (DESIGN.md, "Deadlines"). Checking it when its micro-batch closes is not enough under overload: the
micro-batch then waits behind the micro-batches already queued for the first stage, and starts compute late; its
results come back past the deadline, having used the device for nothing (Clockwork, Gujarati et al., OSDI 2020:
drop up front what cannot finish in time).

:class:`StartEstimate` predicts when a micro-batch closed now would start on the first stage:

    start delay = max(0, ahead - 0.5) x measured stage-0 time per micro-batch

``ahead``: micro-batches handed to the engine that stage 0 has not finished (the one computing counts half:
on average half of it is left); the stage-0 time is an exponentially weighted mean of the measured ones
(:data:`EWMA_WEIGHT` for the newest). An ROI whose remaining ``ttl_ms`` is shorter than the delay is dropped
as ``stale`` with the ones already past it. The estimate is pure and thread-safe (the batcher asks, the stage
thread reports).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vcascade.core.protocol.wire import Hop, Roi


@dataclass
class RoiItem:
    """One received ROI.

    Attributes:
        roi: the decoded header.
        payload: the encoded crop bytes.
        broker: index of the broker socket it came from (the answer goes back through the same socket).
        t_received_s: perf_counter when the IO thread received it, s.
    """

    roi: Roi
    payload: bytes
    broker: int
    t_received_s: float

    def is_stale(self, now_s: float) -> bool:
        """True when the ROI has a deadline (``ttl_ms > 0``) and this worker has held it longer than ``ttl_ms``."""
        return self.roi.ttl_ms > 0 and (now_s - self.t_received_s) * 1000.0 > self.roi.ttl_ms


@dataclass
class MicroBatch:
    """ROIs computed together. ``data`` is what the next stage consumes (input tensor, then activations).

    Attributes:
        seq: sequence number of the micro-batch in this worker, from 0.
        items: the ROIs, row ``i`` of every tensor belongs to ``items[i]``.
        data: the current activations (tuple of tensors for torch stages; anything for the engine).
        t_closed_s: when the batcher closed the micro-batch.
        t_ready_s: when the input tensor was ready on the first stage's device.
        t_stage_done_s: when each stage finished it, appended in stage order.
        mark_names: hop names of the marks in ``t_stage_done_s`` that are not plain stages, by mark index
            (``link``: the transfer to and from a remote stage group, see :meth:`mark`).
        compute_s: compute time of each stage on this micro-batch, s, in stage order (queue waits excluded).
    """

    seq: int
    items: list[RoiItem]
    data: Any
    t_closed_s: float
    t_ready_s: float
    t_stage_done_s: list[float] = field(default_factory=list)
    mark_names: dict[int, str] = field(default_factory=dict)
    compute_s: list[float] = field(default_factory=list)

    def mark(self, t_s: float, name: str | None = None) -> None:
        """Append a timestamp to ``t_stage_done_s``; ``name`` names its hop when it is not the next stage."""
        if name is not None:
            self.mark_names[len(self.t_stage_done_s)] = name
        self.t_stage_done_s.append(t_s)

    def hop_names(self) -> list[str]:
        """Hop names of ``t_stage_done_s``: ``stage<k>`` counting stages only, or the mark's own name."""
        names, stage = [], 0
        for index in range(len(self.t_stage_done_s)):
            if index in self.mark_names:
                names.append(self.mark_names[index])
            else:
                names.append(f"stage{stage}")
                stage += 1
        return names

    def hops(self, row: int, t_head_done_s: float) -> list[Hop]:
        """Latency account of ``items[row]`` in ms, in order (see the module docstring)."""
        marks = [self.items[row].t_received_s, self.t_closed_s, self.t_ready_s, *self.t_stage_done_s, t_head_done_s]
        names = ["batch_wait", "preprocess", *self.hop_names(), "head"]
        return [(name, (end - start) * 1000.0) for name, start, end in zip(names, marks, marks[1:])]


STOP = object()
"""Put this in the batcher's inbox to make :meth:`MicroBatcher.collect` close its batch and report the stop."""


class MicroBatcher:
    """Collect :class:`RoiItem` s from a queue into micro-batches.

    Args:
        max_batch: ROIs per micro-batch at most (>= 1).
        max_wait_ms: how long a partial micro-batch waits for more ROIs after its first ROI's receive time, ms.
        clock: the clock of ``RoiItem.t_received_s``, seconds (``time.perf_counter``).

    Raises:
        ValueError: ``max_batch < 1`` or ``max_wait_ms < 0``.
    """

    def __init__(self, max_batch: int, max_wait_ms: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch >= 1 and max_wait_ms >= 0, got {max_batch}, {max_wait_ms}")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._clock = clock

    def collect(self, inbox: queue.Queue, idle_timeout_s: float) -> tuple[list[RoiItem], bool]:
        """Block for the first ROI (at most ``idle_timeout_s``), then fill the micro-batch until full or timeout.

        Returns:
            ``(items, stopped)``: the closed micro-batch (empty when nothing arrived in ``idle_timeout_s``) and
            whether :data:`STOP` was taken from the inbox (the items before it are still returned).
        """
        try:
            first = inbox.get(timeout=idle_timeout_s)
        except queue.Empty:
            return [], False
        if first is STOP:
            return [], True
        items = [first]
        deadline = first.t_received_s + self.max_wait_s
        while len(items) < self.max_batch:
            item = self._next(inbox, deadline - self._clock())
            if item is None:
                break
            if item is STOP:
                return items, True
            items.append(item)
        return items, False

    @staticmethod
    def _next(inbox: queue.Queue, wait_s: float):
        try:
            return inbox.get(timeout=wait_s) if wait_s > 0 else inbox.get_nowait()
        except queue.Empty:
            return None


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

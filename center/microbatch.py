"""The unit of work inside a worker: ROI items, grouped into a micro-batch that flows through the stages.

Every timestamp is ``time.perf_counter()`` seconds on this host (monotonic). The latency account of an ROI
is built from consecutive differences of its timestamps, so its hops sum exactly to the worker's hold time:

=============  ==========================================================================
hop            interval
=============  ==========================================================================
batch_wait     ROI received by the IO thread -> its micro-batch closed
preprocess     micro-batch closed -> input tensor ready on the first stage's device
stage<k>       previous stage done (or tensor ready) -> stage k output ready (incl. queue wait)
head           last stage done -> result built
=============  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vcascade.wire import Hop, Roi


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
    """

    seq: int
    items: list[RoiItem]
    data: Any
    t_closed_s: float
    t_ready_s: float
    t_stage_done_s: list[float] = field(default_factory=list)

    def hops(self, row: int, t_head_done_s: float) -> list[Hop]:
        """Latency account of ``items[row]`` in ms, in order (see the module docstring)."""
        marks = [self.items[row].t_received_s, self.t_closed_s, self.t_ready_s, *self.t_stage_done_s, t_head_done_s]
        names = ["batch_wait", "preprocess", *(f"stage{k}" for k in range(len(self.t_stage_done_s))), "head"]
        return [(name, (end - start) * 1000.0) for name, start, end in zip(names, marks, marks[1:])]

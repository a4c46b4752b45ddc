"""The unit of work inside a worker: ROI items, grouped into a micro-batch that flows through the stages.

Every timestamp is ``time.perf_counter()`` seconds on this host (monotonic). The latency account of an ROI
is built from consecutive differences of its timestamps, so its hops sum exactly to the worker's hold time:

=============  ==========================================================================
hop            interval
=============  ==========================================================================
batch_wait     ROI received by the IO thread -> its micro-batch closed
preprocess     micro-batch closed -> input tensor ready on the first stage's device
stage<k>       previous stage done (or tensor ready) -> stage k output ready (incl. queue wait)
link           remote stage group: sent -> answer received, less the group's compute (both directions)
head           last stage done -> result built
=============  ==========================================================================
"""

from __future__ import annotations

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

"""What the broker keeps per ROI: :class:`Pending` while it waits in a queue, :class:`InFlight` while a worker
holds it. Plain records, no behaviour beyond the deadline check; :class:`vcascade.broker.dispatch.Dispatcher`
owns them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Pending:
    """An ROI waiting in the broker queue.

    Attributes:
        roi_id: globally unique ROI id (``wire.Roi.roi_id``).
        camera: camera name; selects the per-camera queue.
        received_s: time the broker received it, seconds on the caller's monotonic clock.
        ttl_ms: deadline, ms it may wait in the queue; ``0`` means none (``wire.Roi.ttl_ms``).
        data: opaque payload for the caller (routing identity and frames); never inspected here.
        attempts: times it was dispatched to a worker so far (0 while never dispatched).
        recognizer: the recognizer it is for (``wire.Roi.recognizer``); ``""``: any worker.
        size_bytes: its weight in the queue: header and crop frames as received, bytes.
        edge: the edge that sent it (its routing id); its bytes count against that edge's bound.
        deferrable: a refresh or a better crop of a track already recognised (``wire.Roi.send_reason`` in
            ``wire.DEFERRABLE_SEND_REASONS``): dispatched after the other ROIs, dropped first by a bound.
    """

    roi_id: str
    camera: str
    received_s: float
    ttl_ms: float = 0.0
    data: Any = None
    attempts: int = 0
    recognizer: str = ""
    size_bytes: int = 0
    edge: Hashable = b""
    deferrable: bool = False

    def is_stale(self, now_s: float) -> bool:
        """True when the ROI has a deadline and waited longer than ``ttl_ms`` by ``now_s`` (seconds)."""
        return self.ttl_ms > 0 and (now_s - self.received_s) * 1000.0 > self.ttl_ms


@dataclass(slots=True)
class InFlight:
    """An ROI handed to a worker and not yet answered.

    Attributes:
        pending: the queued ROI as it was enqueued.
        worker: key of the worker holding it.
        dispatched_s: time it was assigned, seconds on the caller's clock.
        seq: its enqueue order (keeps a re-queued ROI in order with its camera queue).
    """

    pending: Pending
    worker: Hashable
    dispatched_s: float
    seq: int = 0

"""The broker's queue bounds, in ROIs and in bytes, and which queued ROI pays when one is exceeded. Pure.

A bound on ROIs alone does not bound memory: 40 ROIs of 16 MiB (the largest message part a socket accepts,
:data:`vcascade.core.transport.sockets.MAX_MESSAGE_BYTES`) weigh 640 MiB. :class:`ByteBounds` caps the bytes queued in
all, per recognizer (one without workers cannot hold all memory) and per edge (one flooding edge cannot
either); :func:`over_bound_victim` is the drop-oldest rule :class:`vcascade.broker.dispatch.Dispatcher` applies
until every bound holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from vcascade.broker.queues import RoiQueues
from vcascade.broker.records import Pending

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ByteBounds:
    """Bytes of queued ROIs (header and crop as received) at most, ``BrokerConfig`` defaults.

    Attributes:
        total: all queued ROIs together, bytes.
        recognizer: the ROIs queued for one recognizer, bytes.
        edge: the ROIs queued from one edge, bytes.

    Raises:
        ValueError: a bound below 1.
    """

    total: int = 512 * MIB
    recognizer: int = 256 * MIB
    edge: int = 256 * MIB

    def __post_init__(self) -> None:
        if min(self.total, self.recognizer, self.edge) < 1:
            raise ValueError(f"byte bounds must be >= 1: {self}")


def over_bound_victim(queues: RoiQueues, queue_max: int, bounds: ByteBounds, added: list[Pending]) -> Pending | None:
    """Remove from ``queues`` and return the ROI that pays for the first bound exceeded, or None when all hold.

    Args:
        queues: the dispatcher's queues.
        queue_max: ROIs that may wait at most, all queues together.
        bounds: bytes that may wait at most, in all, per recognizer and per edge.
        added: the ROIs just queued: only their recognizers and edges can be over their bounds.

    Who pays: above ``queue_max``, the longest queue's oldest ROI; above ``bounds.total``, the heaviest queue's
    oldest; above ``bounds.recognizer``, the oldest of that recognizer's heaviest queue; above ``bounds.edge``,
    that edge's oldest ROI (the flooding camera, recognizer or edge pays for its own backlog). Within the queue
    that pays, its oldest deferrable ROI (a refresh or better crop) goes before any first sighting
    (:meth:`RoiQueues.pop_victim`).
    """
    if len(queues) > queue_max:
        return queues.pop_victim(queues.longest())[1]
    if queues.total_bytes > bounds.total:
        return queues.pop_victim(queues.heaviest())[1]
    if queues.total_bytes <= min(bounds.recognizer, bounds.edge):
        return None  # no recognizer and no edge can hold more than all queued ROIs together (the usual case)
    for recognizer in dict.fromkeys(item.recognizer for item in added):
        if queues.recognizer_bytes(recognizer) > bounds.recognizer:
            return queues.pop_victim(queues.heaviest(recognizer))[1]
    for edge in dict.fromkeys(item.edge for item in added):
        if queues.edge_bytes(edge) > bounds.edge:
            return queues.pop_oldest_of_edge(edge)[1]
    return None

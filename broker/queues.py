"""The broker's ROI queues: one FIFO per (recognizer, camera), kept in round-robin order. Pure, no clock.

:class:`vcascade.broker.dispatch.Dispatcher` decides what to take from them; this module only keeps them ordered and
bounded by their owner. Each entry is ``(seq, item)``: ``seq`` is the enqueue order over all queues, so a
re-queued ROI goes back to its place and a queue always stays oldest first.

The queued bytes (``item.size_bytes``: header and crop as received) are kept per queue, per recognizer, per edge
and in all, so the owner bounds memory in bytes, not only in ROIs (a few huge crops weigh more than many small ones).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol

QueueKey = tuple[str, str]
"""``(recognizer, camera)``: ROIs of one camera for one recognizer (``""``: any recognizer)."""


class Queued(Protocol):
    """What the queues need of an item: its id, camera, recognizer, size and edge
    (:class:`vcascade.broker.dispatch.Pending`)."""

    roi_id: str
    camera: str
    recognizer: str
    size_bytes: int
    edge: Hashable


Entry = tuple[int, Queued]


class RoiQueues:
    """FIFO queues keyed by :data:`QueueKey`, iterated in round-robin order (a served queue goes last).

    Not thread-safe; owned by one :class:`vcascade.broker.dispatch.Dispatcher`.
    """

    def __init__(self) -> None:
        self._queues: OrderedDict[QueueKey, deque[Entry]] = OrderedDict()
        self._ids: set[str] = set()
        self.total_bytes = 0
        """Bytes of all queued ROIs."""
        self._queue_bytes: dict[QueueKey, int] = {}
        self._recognizer_bytes: dict[str, int] = {}
        self._edge_bytes: dict[Hashable, int] = {}
        self._edge_entries: dict[tuple[QueueKey, Hashable], int] = {}  # (queue, edge) -> its entries there

    def __len__(self) -> int:
        """ROIs queued in all queues."""
        return len(self._ids)

    def __contains__(self, roi_id: str) -> bool:
        """True when an ROI with this id is queued."""
        return roi_id in self._ids

    def __bool__(self) -> bool:
        """True when some ROI is queued."""
        return bool(self._ids)

    def keys(self) -> list[QueueKey]:
        """The non-empty queues in round-robin order (a snapshot: safe to modify the queues while iterating)."""
        return list(self._queues)

    def iter_keys(self) -> Iterator[QueueKey]:
        """The non-empty queues in round-robin order, lazily (O(1) to start): stop iterating before changing the
        queues (:meth:`keys` gives a copy that survives changes)."""
        return iter(self._queues)

    def has_queue(self, key: QueueKey) -> bool:
        """True when queue ``key`` holds an ROI."""
        return key in self._queues

    def append(self, seq: int, item: Queued) -> None:
        """Queue ``item`` (enqueue order ``seq``) at the tail of its (recognizer, camera) queue."""
        self._queues.setdefault((item.recognizer, item.camera), deque()).append((seq, item))
        self._add(item)

    def put_back(self, entries: Iterable[Entry]) -> None:
        """Return entries taken from the queues (a lost worker's ROIs) to their places, by ``seq``."""
        by_key: dict[QueueKey, list[Entry]] = {}
        for seq, item in entries:
            by_key.setdefault((item.recognizer, item.camera), []).append((seq, item))
            self._add(item)
        for key, back in by_key.items():
            queue = self._queues.setdefault(key, deque())
            self._queues[key] = deque(sorted([*back, *queue], key=lambda entry: entry[0]))

    def pop_head(self, key: QueueKey) -> Entry:
        """Remove and return the oldest entry of queue ``key`` (an empty queue is removed). Raises KeyError."""
        queue = self._queues[key]
        entry = queue.popleft()
        if not queue:
            del self._queues[key]
        self._remove(entry[1])
        return entry

    def pop_oldest_of_edge(self, edge: Hashable) -> Entry:
        """Remove and return the oldest entry sent by ``edge``, whichever queue holds it. Each queue holding some of
        its entries is read from its head to the edge's first entry (a camera's queue holds one edge's ROIs: its
        head). Raises KeyError when the edge has nothing queued."""
        found: tuple[QueueKey, int, Entry] | None = None
        for key, queue in self._queues.items():
            if not self._edge_entries.get((key, edge)):
                continue
            index = next(i for i, entry in enumerate(queue) if entry[1].edge == edge)
            if found is None or queue[index][0] < found[2][0]:
                found = (key, index, queue[index])
        if found is None:
            raise KeyError(edge)
        key, index, entry = found
        del self._queues[key][index]
        if not self._queues[key]:
            del self._queues[key]
        self._remove(entry[1])
        return entry

    def rotate(self, key: QueueKey) -> None:
        """Move queue ``key`` (just served) to the end of the round-robin order, if it still has entries."""
        if key in self._queues:
            self._queues.move_to_end(key)

    def longest(self) -> QueueKey:
        """The queue with the most entries; ties: the one whose head is oldest. Raises ValueError when empty."""
        return max(self._queues, key=lambda key: (len(self._queues[key]), -self._queues[key][0][0]))

    def heaviest(self, recognizer: str | None = None) -> QueueKey:
        """The queue holding the most bytes (of ``recognizer``'s queues when given); ties: the one whose head is
        oldest. Raises ValueError when there is no such queue."""
        keys = [key for key in self._queues if recognizer is None or key[0] == recognizer]
        return max(keys, key=lambda key: (self._queue_bytes.get(key, 0), -self._queues[key][0][0]))

    def recognizer_bytes(self, recognizer: str) -> int:
        """Bytes queued for ``recognizer`` (``""``: for any recognizer)."""
        return self._recognizer_bytes.get(recognizer, 0)

    def edge_bytes(self, edge: Hashable) -> int:
        """Bytes queued from ``edge``."""
        return self._edge_bytes.get(edge, 0)

    def remove_if(self, doomed: Callable[[Queued], bool]) -> list[Queued]:
        """Remove and return every queued item for which ``doomed(item)`` is true, queue by queue. O(queued)."""
        removed = []
        for key in list(self._queues):
            keep: deque[Entry] = deque()
            for entry in self._queues[key]:
                if doomed(entry[1]):
                    removed.append(entry[1])
                else:
                    keep.append(entry)
            if keep:
                self._queues[key] = keep
            else:
                del self._queues[key]
        for item in removed:
            self._remove(item)
        return removed

    def drain(self) -> list[Queued]:
        """Remove and return every queued item, in enqueue order."""
        entries = sorted((entry for queue in self._queues.values() for entry in queue), key=lambda e: e[0])
        self._queues.clear()
        for _, item in entries:
            self._remove(item)
        return [item for _, item in entries]

    def depth_by_recognizer(self) -> dict[str, int]:
        """Queued ROIs per recognizer (``""``: ROIs for any recognizer); recognizers with none are absent."""
        depths: dict[str, int] = {}
        for (recognizer, _), queue in self._queues.items():
            depths[recognizer] = depths.get(recognizer, 0) + len(queue)
        return depths

    def _add(self, item: Queued) -> None:
        self._ids.add(item.roi_id)
        self._count(item, 1)

    def _remove(self, item: Queued) -> None:
        self._ids.discard(item.roi_id)
        self._count(item, -1)

    def _count(self, item: Queued, sign: int) -> None:
        """Add (``sign`` 1) or take off (-1) ``item``'s bytes in every byte count it is part of, and the item in its
        (queue, edge) count; zero counts are deleted, so the tables hold only what has something queued."""
        key = (item.recognizer, item.camera)
        n = sign * item.size_bytes
        self.total_bytes += n
        for table, entry, change in ((self._queue_bytes, key, n), (self._recognizer_bytes, item.recognizer, n),
                                     (self._edge_bytes, item.edge, n), (self._edge_entries, (key, item.edge), sign)):
            left = table.get(entry, 0) + change
            if left:
                table[entry] = left
            else:
                table.pop(entry, None)

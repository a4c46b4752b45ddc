"""The broker's ROI queues: one per (recognizer, camera), kept in round-robin order. Pure, no clock.

:class:`vcascade.broker.dispatch.Dispatcher` decides what to take from them; this module only keeps them ordered and
bounded by their owner. Each entry is ``(seq, item)``: ``seq`` is the enqueue order over all queues, so a
re-queued ROI goes back to its place and a queue always stays oldest first.

Two classes of ROI (issue 21): a queue holds its *prompt* ROIs (first sightings, and any ROI not said to be
deferrable) and its *deferrable* ones (``item.deferrable``: refreshes and better crops of tracks already
recognised, ``wire.DEFERRABLE_SEND_REASONS``) in two FIFOs (:class:`CameraQueue`). Dispatch order
(:meth:`RoiQueues.iter_keys`, :meth:`RoiQueues.pop_head`): the queues holding prompt ROIs round-robin, each giving
its oldest prompt ROI; only when none of those can be served, the other queues round-robin. So under overload
the capacity goes to first sightings, as the edges shed deferrable sends first (``vcascade.edge.selection.degrade``), while
cameras stay served round-robin within each class. A bound's victim (:meth:`RoiQueues.pop_victim`) is the
queue's oldest deferrable ROI, else its oldest.

The queued bytes (``item.size_bytes``: header and crop as received) are kept per queue, per recognizer, per edge
and in all, so the owner bounds memory in bytes, not only in ROIs (a few huge crops weigh more than many small ones).
"""

from __future__ import annotations

import heapq
import itertools
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
    deferrable: bool


Entry = tuple[int, Queued]


class CameraQueue:
    """The entries of one (recognizer, camera) queue in two FIFOs, ``prompt`` and ``deferrable`` (by
    ``item.deferrable``), each oldest first. Not empty while its owner keeps it."""

    __slots__ = ("deferrable", "prompt")

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.prompt: deque[Entry] = deque()
        self.deferrable: deque[Entry] = deque()
        for entry in entries:
            self.append(entry)

    def __len__(self) -> int:
        return len(self.prompt) + len(self.deferrable)

    def __iter__(self) -> Iterator[Entry]:
        """Every entry, oldest (lowest ``seq``) first."""
        return heapq.merge(self.prompt, self.deferrable, key=lambda entry: entry[0])

    def append(self, entry: Entry) -> None:
        """Add ``entry`` at the tail of its class's FIFO (call in ``seq`` order)."""
        (self.deferrable if entry[1].deferrable else self.prompt).append(entry)

    def head_seq(self) -> int:
        """``seq`` of the oldest entry. Raises IndexError when empty."""
        return min(fifo[0][0] for fifo in (self.prompt, self.deferrable) if fifo)

    def pop_next(self) -> Entry:
        """Remove and return the next entry to dispatch: the oldest prompt one, else the oldest deferrable one."""
        return (self.prompt or self.deferrable).popleft()

    def pop_victim(self) -> Entry:
        """Remove and return the entry a bound drops: the oldest deferrable one, else the oldest prompt one."""
        return (self.deferrable or self.prompt).popleft()

    def oldest_of_edge(self, edge: Hashable) -> Entry | None:
        """The oldest entry sent by ``edge`` (each FIFO read from its head to the edge's first entry), or None."""
        found = (next((e for e in fifo if e[1].edge == edge), None) for fifo in (self.prompt, self.deferrable))
        return min((e for e in found if e is not None), key=lambda e: e[0], default=None)

    def remove(self, entry: Entry) -> None:
        """Remove ``entry`` (one of this queue's). Raises ValueError when it is not here."""
        (self.deferrable if entry[1].deferrable else self.prompt).remove(entry)


class RoiQueues:
    """:class:`CameraQueue` s keyed by :data:`QueueKey`, iterated in round-robin order (a served queue goes last),
    queues holding prompt ROIs first (see the module docstring).

    Not thread-safe; owned by one :class:`vcascade.broker.dispatch.Dispatcher`.
    """

    def __init__(self) -> None:
        self._queues: OrderedDict[QueueKey, CameraQueue] = OrderedDict()
        self._prompt_order: OrderedDict[QueueKey, None] = OrderedDict()  # the queues holding prompt ROIs
        self._ids: set[str] = set()
        self.total_bytes = 0
        """Bytes of all queued ROIs."""
        self._queue_bytes: dict[QueueKey, int] = {}
        self._recognizer_bytes: dict[str, int] = {}
        self._recognizer_entries: dict[str, int] = {}
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
        """The non-empty queues in dispatch order, lazily (O(1) to start): those holding prompt ROIs in round-robin
        order, then the others in round-robin order. Stop iterating before changing the queues (:meth:`keys`
        gives a copy that survives changes)."""
        rest = (key for key in self._queues if key not in self._prompt_order)
        return itertools.chain(self._prompt_order, rest)

    def has_queue(self, key: QueueKey) -> bool:
        """True when queue ``key`` holds an ROI."""
        return key in self._queues

    def append(self, seq: int, item: Queued) -> None:
        """Queue ``item`` (enqueue order ``seq``) at the tail of its (recognizer, camera) queue."""
        key = (item.recognizer, item.camera)
        queue = self._queues.get(key)
        if queue is None:  # not setdefault: it would build a CameraQueue for every ROI
            queue = self._queues[key] = CameraQueue()
        queue.append((seq, item))
        if not item.deferrable:
            self._prompt_order.setdefault(key)
        self._add(item)

    def put_back(self, entries: Iterable[Entry]) -> None:
        """Return entries taken from the queues (a lost worker's ROIs) to their places, by ``seq``."""
        by_key: dict[QueueKey, list[Entry]] = {}
        for seq, item in entries:
            by_key.setdefault((item.recognizer, item.camera), []).append((seq, item))
            self._add(item)
        for key, back in by_key.items():
            queue = self._queues.setdefault(key, CameraQueue())
            self._queues[key] = CameraQueue(sorted([*back, *queue], key=lambda entry: entry[0]))
            self._forget_if_empty(key)

    def pop_head(self, key: QueueKey) -> Entry:
        """Remove and return the next entry of queue ``key`` to dispatch: its oldest prompt entry, else its oldest
        (an empty queue is removed). Raises KeyError."""
        return self._taken_from(key, self._queues[key].pop_next())

    def pop_victim(self, key: QueueKey) -> Entry:
        """Remove and return the entry of queue ``key`` a bound drops: its oldest deferrable entry, else its oldest
        (an empty queue is removed). Raises KeyError."""
        return self._taken_from(key, self._queues[key].pop_victim())

    def _taken_from(self, key: QueueKey, entry: Entry) -> Entry:
        """Book ``entry``, just removed from queue ``key``, as no longer queued; returns it."""
        self._forget_if_empty(key)
        self._remove(entry[1])
        return entry

    def _forget_if_empty(self, key: QueueKey) -> None:
        """Keep the two round-robin orders to the queues that hold entries (prompt entries for the first)."""
        queue = self._queues[key]
        if queue.prompt:
            self._prompt_order.setdefault(key)
        else:
            self._prompt_order.pop(key, None)
        if not queue:
            del self._queues[key]

    def pop_oldest_of_edge(self, edge: Hashable) -> Entry:
        """Remove and return the oldest entry sent by ``edge``, whichever queue holds it. Each queue holding some of
        its entries is read from its head to the edge's first entry (a camera's queue holds one edge's ROIs: its
        head). Raises KeyError when the edge has nothing queued."""
        found: tuple[QueueKey, Entry] | None = None
        for key, queue in self._queues.items():
            if not self._edge_entries.get((key, edge)):
                continue
            entry = queue.oldest_of_edge(edge)
            if entry is not None and (found is None or entry[0] < found[1][0]):
                found = (key, entry)
        if found is None:
            raise KeyError(edge)
        key, entry = found
        self._queues[key].remove(entry)
        return self._taken_from(key, entry)

    def rotate(self, key: QueueKey) -> None:
        """Move queue ``key`` (just served) to the end of the round-robin orders it is in, if it still has entries."""
        if key in self._queues:
            self._queues.move_to_end(key)
        if key in self._prompt_order:
            self._prompt_order.move_to_end(key)

    def longest(self) -> QueueKey:
        """The queue with the most entries; ties: the one whose head is oldest. Raises ValueError when empty."""
        return max(self._queues, key=lambda key: (len(self._queues[key]), -self._queues[key].head_seq()))

    def heaviest(self, recognizer: str | None = None) -> QueueKey:
        """The queue holding the most bytes (of ``recognizer``'s queues when given); ties: the one whose head is
        oldest. Raises ValueError when there is no such queue."""
        keys = [key for key in self._queues if recognizer is None or key[0] == recognizer]
        return max(keys, key=lambda key: (self._queue_bytes.get(key, 0), -self._queues[key].head_seq()))

    def holds_rivals(self, recognizer: str) -> bool:
        """True when some queued ROI could take a worker that an ROI for ``recognizer`` could take: one for the same
        recognizer or for any (``""``); for ``recognizer`` ``""`` (any worker), any queued ROI. O(1)."""
        if not recognizer:
            return bool(self._ids)
        return recognizer in self._recognizer_entries or "" in self._recognizer_entries

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
            keep = CameraQueue()
            for entry in self._queues[key]:
                if doomed(entry[1]):
                    removed.append(entry[1])
                else:
                    keep.append(entry)
            self._queues[key] = keep
            self._forget_if_empty(key)
        for item in removed:
            self._remove(item)
        return removed

    def drain(self) -> list[Queued]:
        """Remove and return every queued item, in enqueue order."""
        entries = sorted((entry for queue in self._queues.values() for entry in queue), key=lambda e: e[0])
        self._queues.clear()
        self._prompt_order.clear()
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
        recognizer's and its (queue, edge) count; zero counts are deleted, so the tables hold only what has something
        queued."""
        key = (item.recognizer, item.camera)
        n = sign * item.size_bytes
        self.total_bytes += n
        _add_to(self._queue_bytes, key, n)  # one call per table, no loop over a tuple of them: twice per queued ROI
        _add_to(self._recognizer_bytes, item.recognizer, n)
        _add_to(self._recognizer_entries, item.recognizer, sign)
        _add_to(self._edge_bytes, item.edge, n)
        _add_to(self._edge_entries, (key, item.edge), sign)


def _add_to(table: dict, key: Hashable, change: int) -> None:
    """Add ``change`` to ``table[key]`` (absent: 0), deleting the entry when the sum is 0."""
    left = table.get(key, 0) + change
    if left:
        table[key] = left
    else:
        table.pop(key, None)

"""The slots of a worker's identity space: one row per local identity in parallel arrays, plus two vector indexes.

:class:`vcascade.center.identity.space.IdentitySpace` keeps its identities here and decides what goes in; this
module only stores. A slot holds an identity's sum of unit embeddings and its normalised centroid (float32
(D,)), its number of looks, its last sighting (camera, topology code, time) and its enrolment embedding with the
store version the enrolment landed at. Slots are reused when freed and the arrays double when full, so an
identity's slot number is stable while it lives; both vector indexes are keyed by slot, because ids may be
negative (provisional). Not thread-safe: the space's lock guards it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vcascade.center.identity.index import make_index
from vcascade.center.identity.store import LIVE, Sighting, StoredIdentity
from vcascade.center.identity.topology import UNKNOWN, Topology
from vcascade.center.identity.vectors import l2_normalise

NOT_LANDED = np.iinfo(np.int64).max
"""Enrolment version of an identity whose enrolment has not reached the store yet."""
UNUSED = np.iinfo(np.int64).min
"""Id of a free slot (provisional ids are negative, so -1 cannot mark one)."""


class IdentitySlots:
    """Slot arrays and vector indexes of the local identities (base of the identity space).

    Args:
        index_kind: vector index kind (``exact`` or ``ann``, :func:`vcascade.center.identity.index.make_index`).
        topology: camera topology (a slot keeps its last camera's code), or None.
    """

    def __init__(self, index_kind: str, topology: Topology | None) -> None:
        self.index_kind = index_kind
        self.topology = topology
        self._dim: int | None = None
        self._index = self._first_index = None  # by slot: centroids, enrolment embeddings
        self._slot: dict[int, int] = {}
        self._free: list[int] = []
        self._ids = np.zeros(0, np.int64)
        self._sums = self._units = np.zeros((0, 0), np.float32)
        self._counts = np.zeros(0, np.int64)
        self._codes = np.zeros(0, np.int32)  # topology code of the last camera
        self._t_s = np.zeros(0, np.float64)  # last sighting on the topology clock, s
        self._firsts = np.zeros((0, 0), np.float32)  # unit enrolment embedding
        self._landed = np.zeros(0, np.int64)  # store version its enrolment landed at (NOT_LANDED: not yet)
        self._seen: list[Sighting | None] = []

    def __len__(self) -> int:
        return len(self._slot)

    def _settle_dim(self, records: list[StoredIdentity]) -> None:
        """Before the first vector is known: the space's size is the most common among the live records."""
        if self._dim is None:
            sizes = Counter(len(r.vector_sum) for r in records if r.state == LIVE and r.vector_sum is not None)
            if sizes:
                self._ensure_dim(sizes.most_common(1)[0][0])

    def _fits(self, record: StoredIdentity) -> bool:
        """A live record whose vectors have the space's size."""
        return record.vector_sum is not None and len(record.vector_sum) == self._dim and (
            record.first is None or len(record.first) == self._dim)

    def _ensure_dim(self, dim: int) -> None:
        if self._dim is None:
            self._dim = dim
            self._index, self._first_index = make_index(self.index_kind, dim), make_index(self.index_kind, dim)
            self._sums = self._units = self._firsts = np.zeros((0, dim), np.float32)
        elif dim != self._dim:
            raise ValueError(f"embedding size {dim} differs from the identity space's {self._dim}")

    def _new_slot(self, ident: int) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._seen)
            if slot == len(self._ids):
                self._grow(max(16, 2 * slot))
            self._seen.append(None)
        self._slot[ident] = slot
        return slot

    def _grow(self, size: int) -> None:
        extra = size - len(self._ids)
        self._ids = np.concatenate([self._ids, np.full(extra, UNUSED, np.int64)])
        self._sums = np.concatenate([self._sums, np.zeros((extra, self._dim), np.float32)])
        self._units = np.concatenate([self._units, np.zeros((extra, self._dim), np.float32)])
        self._counts = np.concatenate([self._counts, np.zeros(extra, np.int64)])
        self._codes = np.concatenate([self._codes, np.full(extra, UNKNOWN, np.int32)])
        self._t_s = np.concatenate([self._t_s, np.zeros(extra, np.float64)])
        self._firsts = np.concatenate([self._firsts, np.zeros((extra, self._dim), np.float32)])
        self._landed = np.concatenate([self._landed, np.full(extra, NOT_LANDED, np.int64)])

    def _set(self, slot: int, ident: int, total: np.ndarray, count: int, seen: Sighting) -> None:
        self._ids[slot] = ident
        self._sums[slot] = total
        self._units[slot] = l2_normalise(total[None])[0]
        self._counts[slot] = count
        self._seen[slot] = seen
        self._codes[slot] = UNKNOWN if self.topology is None else self.topology.code(seen.camera)
        self._t_s[slot] = seen.t_ms / 1000.0
        self._index.add(np.array([slot], np.int64), self._units[slot][None])  # keyed by slot: ids may be < 0

    def _set_enrolment(self, slot: int, first: np.ndarray, version: int) -> None:
        """Keep a slot's enrolment: its unit embedding (float32 (D,), indexed) and the version it landed at."""
        self._firsts[slot] = first
        self._landed[slot] = version
        self._first_index.add(np.array([slot], np.int64), self._firsts[slot][None])

    def _release(self, ident: int) -> None:
        """Free ``ident``'s slot (for reuse) and take it out of both indexes."""
        slot = self._slot.pop(ident)
        self._ids[slot] = UNUSED
        self._seen[slot] = None
        self._free.append(slot)
        self._index.remove(np.array([slot], np.int64))
        self._first_index.remove(np.array([slot], np.int64))

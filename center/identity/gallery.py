"""Exemplar galleries: several looks kept per identity, matched by the most similar of them.

An identity's centroid is the mean of every look matched to it; a returning object's look is then compared with
a mean of all its passages, and two objects whose looks a few mistakes mixed share one mean. DeepSORT keeps
instead a budget of recent appearance descriptors per track and matches by the smallest cosine distance to any
of them (Wojke et al., "Simple Online and Realtime Tracking with a Deep Association Metric", ICIP 2017,
``nn_budget`` 100); face-recognition galleries keep several templates per person. Here each identity keeps at
most ``size`` unit exemplars: its enrolment embedding first, then looks matched to it, a look kept only when it is
not within ``diversity`` (cosine) of an exemplar already kept, the oldest non-enrolment exemplar replaced when
full. An identity's score for a query is the largest of its centroid's and its exemplars' cosines.

Rows are kept in one flat float32 (rows, D) array, with a (slots, size) table of each slot's rows, so a query is
one matrix-vector product and a per-slot maximum. Not thread-safe: the identity space calls it under its lock.
"""

from __future__ import annotations

import numpy as np

FREE = -1
"""Owner of a free row."""


class Gallery:
    """Up to ``size`` exemplars per identity slot.

    Args:
        size: exemplars per identity, >= 1.
        diversity: a look whose cosine with an exemplar already kept is at or above this is not kept (1.0: every
            look is kept, the oldest replaced).
    """

    def __init__(self, size: int, diversity: float = 1.0) -> None:
        self.size, self.diversity = int(size), float(diversity)
        self._vecs = np.zeros((0, 0), np.float32)
        self._owner = np.zeros(0, np.int64)
        self._age = np.zeros(0, np.int64)  # insertion counter of each row (replacement order)
        self._rows: dict[int, list[int]] = {}  # slot -> its rows, enrolment's first
        self._table = np.full((0, self.size), FREE, np.int64)  # slot -> its rows, FREE-padded (for scores)
        self._free: list[int] = []
        self._clock = 0

    def exemplars(self, slot: int) -> np.ndarray:
        """float32 (k, D) the slot's exemplars: its enrolment embedding, then the others oldest first (k = 0 when
        none)."""
        rows = self._rows.get(slot, [])
        if not rows:
            return np.zeros((0, self._vecs.shape[1]), np.float32)
        return self._vecs[rows[:1] + sorted(rows[1:], key=lambda row: self._age[row])].copy()

    def reset(self, slot: int, first: np.ndarray, others: np.ndarray | None = None) -> None:
        """The slot's exemplars become ``first`` (float32 (D,), the enrolment embedding, always kept) and the
        latest ``size - 1`` of ``others`` (float32 (k, D) unit rows, oldest first; None: none)."""
        self.drop(slot)
        self._put(slot, first)
        if others is not None and self.size > 1:
            for vector in others[-(self.size - 1):]:
                self._put(slot, vector)

    def add(self, slot: int, unit: np.ndarray) -> bool:
        """Offer one look (float32 (D,) unit) to the slot; True when it was kept."""
        rows = self._rows.get(slot)
        if not rows:
            self._put(slot, unit)
            return True
        if self.diversity < 1.0 and float(np.max(self._vecs[rows] @ unit)) >= self.diversity:
            return False
        if len(rows) >= self.size:
            if len(rows) == 1:  # size 1: the enrolment embedding alone
                return False
            oldest = min(rows[1:], key=lambda row: self._age[row])
            self._vecs[oldest] = unit
            self._age[oldest] = self._tick()
            return True
        self._put(slot, unit)
        return True

    def drop(self, slot: int) -> None:
        """Forget the slot's exemplars."""
        for row in self._rows.pop(slot, []):
            self._owner[row] = FREE
            self._free.append(row)
        if slot < len(self._table):
            self._table[slot] = FREE

    def scores(self, unit: np.ndarray, slots: int) -> np.ndarray:
        """float32 (slots,) each slot's largest exemplar cosine with ``unit`` (float32 (D,)); -inf without
        exemplars."""
        out = np.full(slots, -np.inf, np.float32)
        if not len(self._owner):
            return out
        sims = np.append(self._vecs @ unit, np.float32(-np.inf))  # index -1 (no row) reads -inf
        known = min(slots, len(self._table))
        out[:known] = sims[self._table[:known]].max(axis=1)
        return out

    def rows(self, slots: np.ndarray) -> int:
        """Exemplars held by ``slots`` (int (n,) slot numbers)."""
        return int(np.isin(self._owner, slots).sum())

    def _put(self, slot: int, unit: np.ndarray) -> None:
        if not len(self._owner):
            self._vecs = np.zeros((0, len(unit)), np.float32)
        if not self._free:
            grow = max(16, len(self._owner))
            start = len(self._owner)
            self._vecs = np.concatenate([self._vecs, np.zeros((grow, len(unit)), np.float32)])
            self._owner = np.concatenate([self._owner, np.full(grow, FREE, np.int64)])
            self._age = np.concatenate([self._age, np.zeros(grow, np.int64)])
            self._free.extend(range(start + grow - 1, start - 1, -1))
        row = self._free.pop()
        self._vecs[row], self._owner[row], self._age[row] = unit, slot, self._tick()
        rows = self._rows.setdefault(slot, [])
        rows.append(row)
        if slot >= len(self._table):
            grow = max(16, 2 * len(self._table), slot + 1) - len(self._table)
            self._table = np.concatenate([self._table, np.full((grow, self.size), FREE, np.int64)])
        self._table[slot, len(rows) - 1] = row

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

"""Vector index of a worker's local copy of the identity space: ids -> L2-normalised vectors, cosine search.

Exact search (one matrix product over every vector). Branch ``reid-bench`` replaces this module with the same
API plus an approximate index (``AnnIndex``); until then ``make_index("ann", dim)`` raises.
"""

from __future__ import annotations

import numpy as np


class ExactIndex:
    """Exact cosine search over L2-normalised float32 vectors, by matrix product.

    Storage is a dense (capacity, dim) matrix with the live rows first; removing a row moves the last row into
    its place, so add and remove cost O(dim) each and search costs O(n * dim).

    Args:
        dim: vector size D.
    """

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self._vectors = np.zeros((16, self.dim), dtype=np.float32)
        self._ids = np.zeros(16, dtype=np.int64)
        self._row: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._row)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add (or replace) vectors. ``ids``: int64 (n,); ``vectors``: float32 (n, dim), L2-normalised."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        for ident, vector in zip(np.asarray(ids, dtype=np.int64).tolist(), vectors):
            row = self._row.get(ident)
            if row is None:
                row = len(self._row)
                self._grow(row + 1)
                self._row[ident] = row
                self._ids[row] = ident
            self._vectors[row] = vector

    def remove(self, ids: np.ndarray) -> None:
        """Remove vectors by id (int64 (n,)); unknown ids are ignored."""
        for ident in np.asarray(ids, dtype=np.int64).tolist():
            row = self._row.pop(ident, None)
            if row is None:
                continue
            last = len(self._row)
            if row != last:
                moved = int(self._ids[last])
                self._vectors[row] = self._vectors[last]
                self._ids[row] = moved
                self._row[moved] = row

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most similar vectors per query.

        Args:
            queries: float32 (m, dim), L2-normalised.
            k: neighbours per query, >= 1.

        Returns:
            ``(ids, sims)``: int64 (m, k), -1 where there are fewer than k vectors; float32 (m, k) cosine
            similarities, best first (-inf where the id is -1).
        """
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, self.dim)
        n = len(self._row)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        sims = np.full((len(queries), k), -np.inf, dtype=np.float32)
        if n == 0:
            return ids, sims
        scores = queries @ self._vectors[:n].T  # (m, n)
        take = min(k, n)
        top = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        top = np.take_along_axis(top, order, axis=1)
        ids[:, :take] = self._ids[top]
        sims[:, :take] = np.take_along_axis(scores, top, axis=1)
        return ids, sims

    def _grow(self, rows: int) -> None:
        if rows <= len(self._ids):
            return
        size = max(rows, 2 * len(self._ids))
        self._vectors = np.concatenate([self._vectors, np.zeros((size - len(self._ids), self.dim), np.float32)])
        self._ids = np.concatenate([self._ids, np.zeros(size - len(self._ids), np.int64)])


def make_index(kind: str, dim: int) -> ExactIndex:
    """The local index of ``kind`` (``exact``; ``ann`` arrives with branch ``reid-bench``).

    Raises:
        ValueError: unknown or not yet available ``kind``.
    """
    if kind == "exact":
        return ExactIndex(dim)
    raise ValueError(f"index kind {kind!r} is not available; known: ['exact']")

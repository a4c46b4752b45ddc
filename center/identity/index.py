"""Vector indexes over identity gallery vectors: exact numpy search and approximate search (faiss HNSW).

Both index classes answer the same calls (:class:`VectorIndex`), so an identity store picks one by name
(:func:`make_index`):

* :class:`ExactIndex`: every query against every vector, one matrix product (numpy/BLAS). Exact; cost grows
  linearly with the gallery (34 ms of CPU per query, 16 ms per ROI in micro-batches of 8, at 100,000
  identities of 1,280 dimensions on one core; ``tools/bench_match.py``).
* :class:`AnnIndex` (:mod:`vcascade.center.identity.ann`): an HNSW graph over a learned low-dimensional
  projection of the vectors, its candidates re-ranked by exact full-dimension inner products.

Vectors are L2-normalised float32 rows, so inner product equals cosine similarity. Identity ids are
non-negative int64; ``-1`` (:data:`NO_ID`) marks "no result" in search answers.
"""

from __future__ import annotations

import numpy as np

from vcascade.center.identity.ann import AnnIndex
from vcascade.center.identity.vector_index import (
    NO_ID,
    NO_SIM,
    UNIT_TOLERANCE,
    VectorIndex,
    check_ids,
    check_unit_rows,
    check_vectors,
    grown,
    top_k_columns,
)

__all__ = ["NO_ID", "NO_SIM", "UNIT_TOLERANCE", "AnnIndex", "ExactIndex", "INDEXES", "VectorIndex", "check_ids",
           "check_unit_rows", "check_vectors", "make_index"]


class ExactIndex(VectorIndex):
    """Exact cosine search: one (m, n) matrix product and a top-k selection per call.

    Vectors live in one growing (capacity, dim) float32 array; removal moves the last row into the freed slot,
    so rows in use are always the first ``len(self)``. Not thread-safe.

    Args:
        dim: vector dimension (> 0).

    Raises:
        ValueError: ``dim < 1``.
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self._vectors = np.zeros((16, self.dim), dtype=np.float32)  # (capacity, dim), first _size rows in use
        self._ids = np.full(16, NO_ID, dtype=np.int64)
        self._slot_of: dict[int, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._reserve(self._size + len(ids))
        for key, vector in zip(ids.tolist(), vectors):
            slot = self._slot_of.get(key)
            if slot is None:
                slot = self._size
                self._slot_of[key] = slot
                self._ids[slot] = key
                self._size += 1
            self._vectors[slot] = vector

    def _remove(self, ids: np.ndarray) -> None:
        for key in ids.tolist():
            slot = self._slot_of.pop(key, None)
            if slot is None:
                continue
            last = self._size - 1
            if slot != last:
                moved = int(self._ids[last])
                self._vectors[slot] = self._vectors[last]
                self._ids[slot] = moved
                self._slot_of[moved] = slot
            self._ids[last] = NO_ID
            self._size = last

    def _search(self, queries: np.ndarray, k: int, ids: np.ndarray, sims: np.ndarray) -> None:
        slots, top = top_k_columns(queries @ self._vectors[: self._size].T, k)  # (m, n) -> (m, found)
        ids[:, : slots.shape[1]] = self._ids[slots]
        sims[:, : top.shape[1]] = top

    def _reserve(self, size: int) -> None:
        self._vectors = grown(self._vectors, self._size, size)
        self._ids = grown(self._ids, self._size, size, NO_ID)

INDEXES = {"exact": ExactIndex, "ann": AnnIndex}
"""Index classes by the name a config or benchmark uses."""


def make_index(kind: str, dim: int) -> ExactIndex | AnnIndex:
    """Build an empty index of ``kind`` (``"exact"`` or ``"ann"``) for ``dim``-dimensional vectors.

    Raises:
        ValueError: unknown kind (the known ones named) or ``dim < 1``.
    """
    try:
        cls = INDEXES[kind]
    except KeyError:
        raise ValueError(f"unknown index kind {kind!r}; known: {sorted(INDEXES)}") from None
    return cls(dim)

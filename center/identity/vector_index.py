"""What every identity vector index shares: input checks, the padded answer convention, the base class.

Vectors are L2-normalised float32 rows, so inner product equals cosine similarity. Identity ids are
non-negative int64; :data:`NO_ID` marks "no result" in search answers. The indexes themselves:
:mod:`vcascade.center.identity.index` (exact) and :mod:`vcascade.center.identity.ann` (approximate).
"""

from __future__ import annotations

import numpy as np

NO_ID = -1
"""Id in a search answer where the index holds fewer than ``k`` vectors."""
NO_SIM = -np.inf
"""Similarity paired with :data:`NO_ID` (below any cosine similarity, so it never passes a threshold)."""
UNIT_TOLERANCE = 1e-3
"""Largest accepted deviation of a vector's L2 norm from 1 (float32 rounding of a normalised row is ~1e-7)."""


def check_ids(ids: np.ndarray) -> np.ndarray:
    """Validate identity ids: (n,) integers, non-negative, no repeats.

    Returns:
        The ids as an (n,) int64 array.

    Raises:
        ValueError: not 1-D, not integers, a negative id, or an id repeated within the call.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be a 1-D array (n,), got shape {ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and ids.min() < 0:
        raise ValueError(f"ids must be >= 0, got {int(ids.min())}")
    ordered = np.sort(ids)  # not np.unique: its first call in a process imports numpy.ma (30 ms, on an ROI)
    if ordered.size > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
        raise ValueError("ids repeat within one call")
    return ids


def check_vectors(vectors: np.ndarray, dim: int, what: str = "vectors") -> np.ndarray:
    """Validate (n, dim) rows: finite floats; returns them as C-contiguous float32.

    Raises:
        ValueError: not 2-D, wrong width, or a NaN/inf element.
    """
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise ValueError(f"{what} must have shape (n, {dim}), got {vectors.shape}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if not np.isfinite(vectors).all():
        raise ValueError(f"{what} contain NaN or inf")
    return vectors


def check_unit_rows(vectors: np.ndarray, dim: int) -> np.ndarray:
    """:func:`check_vectors` plus: every row has L2 norm 1 within :data:`UNIT_TOLERANCE`.

    Raises:
        ValueError: as :func:`check_vectors`, or a row that is not L2-normalised (its index and norm named).
    """
    vectors = check_vectors(vectors, dim)
    norms = np.linalg.norm(vectors, axis=1)
    bad = np.flatnonzero(np.abs(norms - 1.0) > UNIT_TOLERANCE)
    if bad.size:
        raise ValueError(f"vectors must be L2-normalised; row {int(bad[0])} has norm {float(norms[bad[0]]):.4g}")
    return vectors


def check_k(k: int) -> int:
    """Validate a neighbour count; returns it as an int. Raises ValueError: not an integer >= 1."""
    if int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)


def check_add(ids: np.ndarray, vectors: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate an ``add`` call: :func:`check_ids`, :func:`check_unit_rows` and as many ids as vectors.

    Raises:
        ValueError: as those two, or the counts differ.
    """
    ids = check_ids(ids)
    vectors = check_unit_rows(vectors, dim)
    if len(ids) != len(vectors):
        raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
    return ids, vectors


class VectorIndex:
    """What :class:`ExactIndex` and :class:`AnnIndex` share: checked public calls over three hooks.

    Subclasses implement ``__len__``, ``_add`` (ids and vectors checked, n >= 1), ``_remove`` (ids checked,
    n >= 1) and ``_search`` (fills the padded answer arrays; called only with a non-empty index and m >= 1).

    Args:
        dim: vector dimension (> 0).

    Raises:
        ValueError: ``dim < 1``.
    """

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = int(dim)

    def __len__(self) -> int:
        """Number of vectors (identities) in the index."""
        raise NotImplementedError

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Insert vectors under ids; an id already present has its vector replaced.

        Args:
            ids: (n,) int64, >= 0, distinct.
            vectors: (n, dim) float32, L2-normalised rows.

        Raises:
            ValueError: bad ids (see :func:`check_ids`), bad vectors (see :func:`check_unit_rows`), or n differs.
        """
        ids, vectors = check_add(ids, vectors, self.dim)
        if len(ids):
            self._add(ids, vectors)

    def remove(self, ids: np.ndarray) -> None:
        """Remove the vectors of ``ids``; ids not in the index are ignored.

        Raises:
            ValueError: bad ids (see :func:`check_ids`).
        """
        ids = check_ids(ids)
        if len(ids):
            self._remove(ids)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most similar vectors to each query, most similar first (approximate for :class:`AnnIndex`).

        Args:
            queries: (m, dim) float32, L2-normalised rows (not checked for unit norm: a scaled query scales its
                similarities but keeps their order).
            k: neighbours per query, >= 1.

        Returns:
            ``(ids, sims)``: (m, k) int64 ids and (m, k) float32 cosine similarities; columns past what the
            index found (it holds fewer than ``k`` vectors) are :data:`NO_ID` and :data:`NO_SIM`.

        Raises:
            ValueError: queries not (m, dim) or not finite; ``k < 1``.
        """
        queries = check_vectors(queries, self.dim, "queries")
        k = check_k(k)
        ids = np.full((len(queries), k), NO_ID, dtype=np.int64)
        sims = np.full((len(queries), k), NO_SIM, dtype=np.float32)
        if len(self) and len(queries):
            self._search(queries, k, ids, sims)
        return ids, sims

    def _add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        raise NotImplementedError

    def _remove(self, ids: np.ndarray) -> None:
        raise NotImplementedError

    def _search(self, queries: np.ndarray, k: int, ids: np.ndarray, sims: np.ndarray) -> None:
        raise NotImplementedError


def top_k_columns(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``min(k, n)`` largest entries of each row of ``sims``, largest first.

    Args:
        sims: (m, n) float32 similarities, n >= 1 (``-inf`` entries sort last).
        k: entries wanted per row, >= 1.

    Returns:
        ``(columns, top)``: (m, min(k, n)) int64 column indices into ``sims`` and (m, min(k, n)) float32 values.
    """
    found = min(k, sims.shape[1])
    columns = np.argpartition(-sims, found - 1, axis=1)[:, :found] if found < sims.shape[1] else \
        np.broadcast_to(np.arange(sims.shape[1]), sims.shape)
    top = np.take_along_axis(sims, columns, axis=1)
    order = np.argsort(-top, axis=1, kind="stable")
    return np.take_along_axis(columns, order, axis=1), np.take_along_axis(top, order, axis=1)


def grown(rows: np.ndarray, used: int, needed: int, fill: float | int = 0) -> np.ndarray:
    """``rows`` (capacity, ...) with room for ``needed`` rows: returned as is when it fits, otherwise a copy of
    doubled capacity (until it fits) keeping the first ``used`` rows, the others set to ``fill``."""
    capacity = max(len(rows), 1)
    if needed <= len(rows):
        return rows
    while capacity < needed:
        capacity *= 2
    bigger = np.full((capacity, *rows.shape[1:]), fill, dtype=rows.dtype)
    bigger[:used] = rows[:used]
    return bigger

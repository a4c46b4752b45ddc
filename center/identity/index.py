"""Vector indexes over identity gallery vectors: exact numpy search and approximate HNSW search (faiss).

Both index classes answer the same calls, so an identity store picks one by name (:func:`make_index`):

* :class:`ExactIndex`: every query against every vector, one matrix product (numpy/BLAS). Exact; cost grows
  linearly with the gallery (34 ms of CPU per query, 16 ms per ROI in micro-batches of 8, at 100,000
  identities of 1,280 dimensions on one core; ``scripts/bench_match.py``).
* :class:`AnnIndex`: a hierarchical navigable small-world graph (HNSW; Malkov & Yashunin, "Efficient and robust
  approximate nearest neighbor search using Hierarchical Navigable Small World graphs", IEEE TPAMI 2020) from
  faiss (Meta; MIT licence, ``faiss-cpu`` on PyPI). At 100,000 identities, 2.2 ms of CPU per query with recall@1
  0.989 against exact search (``expansion_search`` 256, the default), 0.76 ms with recall 0.959 (64): measured
  on a shared, oversubscribed machine by ``scripts/bench_match.py`` (docs/BENCHMARKS.md).

faiss won over usearch (the other candidate): on the benchmark's gallery (30,000 x 1,280-d, one thread) it
searched in 0.39 ms of CPU per query at recall@1 0.99 where usearch needed 0.62 ms for the same recall, built
its graph 5x faster, and, decisively, usearch 2.26's compiled module loaded before ONNX Runtime 1.31 makes the
process crash inside libstdc++ (``import usearch; import onnxruntime`` segfaults), which a worker running ONNX
stages cannot risk. faiss's HNSW graph cannot delete nodes; removal is handled here with tombstones.

Vectors are L2-normalised float32 rows, so inner product equals cosine similarity. Identity ids are
non-negative int64; ``-1`` marks "no result" in search answers.
"""

from __future__ import annotations

import os

import faiss
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
    if len(np.unique(ids)) != len(ids):
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


def _check_k(k: int) -> int:
    if int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)


def _check_add(ids: np.ndarray, vectors: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
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
        ids, vectors = _check_add(ids, vectors, self.dim)
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
        k = _check_k(k)
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
        found = min(k, self._size)
        all_sims = queries @ self._vectors[: self._size].T  # (m, n)
        top = np.argpartition(-all_sims, found - 1, axis=1)[:, :found] if found < self._size else \
            np.broadcast_to(np.arange(self._size), (len(queries), self._size))
        top_sims = np.take_along_axis(all_sims, top, axis=1)
        order = np.argsort(-top_sims, axis=1, kind="stable")
        ids[:, :found] = self._ids[np.take_along_axis(top, order, axis=1)]
        sims[:, :found] = np.take_along_axis(top_sims, order, axis=1)

    def _reserve(self, size: int) -> None:
        capacity = len(self._ids)
        if size <= capacity:
            return
        while capacity < size:
            capacity *= 2
        vectors = np.zeros((capacity, self.dim), dtype=np.float32)
        vectors[: self._size] = self._vectors[: self._size]
        ids = np.full(capacity, NO_ID, dtype=np.int64)
        ids[: self._size] = self._ids[: self._size]
        self._vectors, self._ids = vectors, ids


class AnnIndex(VectorIndex):
    """Approximate cosine search in an HNSW graph (faiss ``IndexHNSWFlat``, inner product on unit vectors).

    faiss's HNSW graph cannot delete nodes, so removal is a tombstone: the node stays in the graph (it still
    helps navigation) and searches skip it (``IDSelectorBitmap`` over the live graph labels). Replacing an id's
    vector is a removal plus a new node. When tombstones outnumber live nodes (and exceed
    ``min_rebuild_tombstones``), the graph is rebuilt from the live vectors: amortised, each node is rebuilt at
    most once per time it was added. Not thread-safe.

    Args:
        dim: vector dimension (> 0).
        connectivity: graph edges per node (HNSW ``M``); more edges raise recall, memory and build time.
        expansion_add: candidate list size while inserting (HNSW ``efConstruction``).
        expansion_search: candidate list size while searching (HNSW ``efSearch``); the main recall/speed knob.
            At 100,000 identities of the demo embedder, recall@1 against exact search is 0.959 / 0.972 / 0.989
            at 64 / 128 / 256 (``scripts/bench_match.py``; docs/BENCHMARKS.md).
        threads: OpenMP threads faiss uses inside each call, set for the calling thread only (1: the caller's
            core, as the worker's thread settings expect; 0: every core).
        min_rebuild_tombstones: tombstones always tolerated before a rebuild.

    Raises:
        ValueError: ``dim < 1``.
    """

    def __init__(self, dim: int, *, connectivity: int = 16, expansion_add: int = 128, expansion_search: int = 256,
                 threads: int = 1, min_rebuild_tombstones: int = 1024) -> None:
        super().__init__(dim)
        self.connectivity, self.expansion_add = int(connectivity), int(expansion_add)
        self.expansion_search = int(expansion_search)
        self.threads = int(threads)
        self.min_rebuild_tombstones = int(min_rebuild_tombstones)
        self._index = self._new_graph()
        self._ids = np.empty(0, dtype=np.int64)  # (graph nodes,) identity id of each node, NO_ID = tombstone
        self._node_of: dict[int, int] = {}
        self._live_bitmap: np.ndarray | None = None  # packed "node is live" bits, rebuilt after a change

    def __len__(self) -> int:
        return len(self._node_of)

    @property
    def tombstones(self) -> int:
        """Graph nodes of removed or replaced vectors that searches skip."""
        return len(self._ids) - len(self._node_of)

    def _add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._bury(ids)
        first = len(self._ids)
        self._ids = np.concatenate([self._ids, ids])
        self._node_of.update(zip(ids.tolist(), range(first, first + len(ids))))
        self._live_bitmap = None  # one bit per node: the new nodes need theirs
        self._call(self._index.add, vectors)
        self._maybe_rebuild()

    def _remove(self, ids: np.ndarray) -> None:
        self._bury(ids)
        self._maybe_rebuild()

    def _search(self, queries: np.ndarray, k: int, ids: np.ndarray, sims: np.ndarray) -> None:
        params = faiss.SearchParametersHNSW(efSearch=max(self.expansion_search, k))
        if self.tombstones:
            if self._live_bitmap is None:
                self._live_bitmap = np.packbits(self._ids != NO_ID, bitorder="little")  # faiss's bit order
            selector = faiss.IDSelectorBitmap(len(self._ids), faiss.swig_ptr(self._live_bitmap))
            params.sel = selector  # ``selector`` stays referenced until the search returns
        found_sims, nodes = self._call(self._index.search, queries, k, params=params)
        hit = nodes >= 0
        ids[hit] = self._ids[nodes[hit]]
        sims[hit] = found_sims[hit]

    def _new_graph(self) -> faiss.IndexHNSWFlat:
        graph = faiss.IndexHNSWFlat(self.dim, self.connectivity, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = self.expansion_add
        return graph

    def _call(self, method, *args, **kwargs):
        """Run a faiss call with this index's OpenMP thread count for the calling thread."""
        faiss.omp_set_num_threads(self.threads or os.cpu_count() or 1)
        return method(*args, **kwargs)

    def _bury(self, ids: np.ndarray) -> None:
        """Turn the nodes of ``ids`` (those present) into tombstones."""
        nodes = [self._node_of.pop(key) for key in ids.tolist() if key in self._node_of]
        if nodes:
            self._ids[nodes] = NO_ID
            self._live_bitmap = None

    def _maybe_rebuild(self) -> None:
        if self.tombstones <= max(len(self), self.min_rebuild_tombstones):
            return
        live = np.flatnonzero(self._ids != NO_ID)
        vectors = self._index.reconstruct_n(0, len(self._ids))[live] if len(live) else None
        self._index, self._ids, self._node_of, self._live_bitmap = self._new_graph(), self._ids[live], {}, None
        self._node_of = dict(zip(self._ids.tolist(), range(len(live))))
        if vectors is not None:
            self._call(self._index.add, vectors)


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

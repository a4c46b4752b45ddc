"""Approximate cosine search: an HNSW graph over a learned projection, candidates re-ranked exactly.

Search runs in two steps, the usual way of making graph search cheap without losing the exact answer order:

1. **Candidates**: the query, projected to ``reduced_dim`` dimensions, walks a hierarchical navigable
   small-world graph (HNSW; Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
   Hierarchical Navigable Small World graphs", IEEE TPAMI 2020) from faiss (Meta; MIT licence, ``faiss-cpu`` on
   PyPI) built over the projected vectors, and returns ``rerank_factor * k`` candidates. The graph stores each
   projected vector as 8-bit codes (faiss ``IndexHNSWSQ``, ``QT_8bit``: per dimension, the training vectors'
   range in 256 steps), a quarter of the float32 bytes: the walk, which is bound by fetching neighbours'
   vectors from memory, visits its nodes faster; the codes only choose candidates.
2. **Re-ranking**: those candidates are re-scored with exact inner products of the full float32 vectors (kept
   here in numpy) and the best ``k`` returned. Reported similarities are therefore exact cosines.

The projection is an uncentred PCA (the top eigenvectors of the second-moment matrix ``X^T X`` of the
training vectors): unlike a centred PCA (faiss ``PCAMatrix``), it keeps inner products, not distances to the
mean, so the mean direction, which dominates non-negative ReLU embeddings, is kept. Training: the graph is
built once the index holds ``train_size`` vectors, with the projection and the 8-bit code ranges learnt from
the live vectors then held (at most ``max_train_vectors``, the first ones; a later vector outside a range is
clipped to it in the graph, never in re-ranking); below that size every search is an exact scan of the stored
vectors (cheap at that size). Every rebuild (tombstones, below) learns both again from the live vectors, so
they follow the gallery as it changes. Vectors of ``dim <= reduced_dim`` are not projected.

At 100,000 identities of the demo embedder (1,280-d) on one (shared, loaded) core, with the defaults:
recall@1 0.993 against exact search at 0.51 ms of CPU per ROI one ROI at a time (the identity space's call) and
0.39 ms in micro-batches of 8 (exact search: 37.2 / 14.9 ms); 0.5-0.75 ms one at a time across runs, up to
1.0 ms while other processes crowd the shared caches (the walk is a chain of random memory reads); graph build
27-45 s. The walk is most of a search's cost (about 0.1 ms is the projection, re-ranking and Python around
it), hence the 8-bit codes and the 96-d projection, with twice the candidates re-ranked to keep recall.
Measured by ``tools/bench_match.py`` (docs/BENCHMARKS.md), which runs exact search side by side.

faiss won over usearch (the other candidate): on the benchmark's gallery (30,000 x 1,280-d, one thread) it
searched faster at the same recall, built its graph 5x faster, and, decisively, usearch 2.26's compiled module
loaded before ONNX Runtime 1.31 makes the process crash inside libstdc++ (``import usearch; import onnxruntime``
segfaults), which a worker running ONNX stages cannot risk.
"""

from __future__ import annotations

import os

import faiss
import numpy as np

from vcascade.center.identity.vector_index import NO_ID, VectorIndex, grown


def uncentred_pca(vectors: np.ndarray, reduced_dim: int) -> np.ndarray:
    """Projection onto the top ``reduced_dim`` eigenvectors of ``vectors^T vectors`` (uncentred PCA).

    For orthonormal columns P, ``<P^T x, P^T q>`` approximates ``<x, q>`` best in the least-squares sense over
    the training rows (Eckart–Young). Args: vectors (n, dim) float32. Returns: (dim, reduced_dim) float32,
    C-contiguous, columns by decreasing eigenvalue.
    """
    vectors = vectors.astype(np.float64, copy=False)
    _, eigenvectors = np.linalg.eigh(vectors.T @ vectors)  # ascending eigenvalues
    return np.ascontiguousarray(eigenvectors[:, ::-1][:, :reduced_dim], dtype=np.float32)


class AnnIndex(VectorIndex):
    """Approximate cosine search: HNSW (faiss ``IndexHNSWSQ``, 8-bit codes, inner product) over an uncentred-PCA
    projection, ``rerank_factor * k`` candidates re-ranked with exact full-dimension inner products (module
    docstring).

    faiss's HNSW graph cannot delete nodes, so removal is a tombstone: the node stays in the graph (it still
    helps navigation) and searches skip it (``IDSelectorBitmap`` over the live nodes). Replacing an id's vector
    is a removal plus a new node. When tombstones outnumber live nodes (and exceed ``min_rebuild_tombstones``),
    the index is rebuilt from the live vectors (projection learnt again): amortised, each node is rebuilt at
    most once per time it was added. Not thread-safe.

    Args:
        dim: vector dimension (> 0).
        reduced_dim: dimension the graph searches in (vectors of ``dim <= reduced_dim`` are not projected).
        connectivity: graph edges per node (HNSW ``M``); more edges raise recall, memory and build time.
        expansion_add: candidate list size while inserting (HNSW ``efConstruction``).
        expansion_search: candidate list size while searching (HNSW ``efSearch``, at least the candidates
            asked); the main recall/speed knob.
        rerank_factor: candidates per neighbour asked that are re-ranked exactly.
        train_size: vectors held before the graph is built (exact scans until then).
        max_train_vectors: most vectors the projection is learnt from (the first live ones).
        threads: OpenMP threads faiss uses inside each call, set for the calling thread only (1: the caller's
            core, as the worker's thread settings expect; 0: every core).
        min_rebuild_tombstones: tombstones always tolerated before a rebuild.

    Defaults: chosen with ``tools/bench_match.py`` (docs/BENCHMARKS.md) for the demo embedder's 1,280-d
    vectors at 100,000 identities.

    Raises:
        ValueError: ``dim``, ``reduced_dim``, ``rerank_factor`` or ``train_size`` below 1.
    """

    def __init__(self, dim: int, *, reduced_dim: int = 96, connectivity: int = 48, expansion_add: int = 80,
                 expansion_search: int = 160, rerank_factor: int = 32, train_size: int = 1024,
                 max_train_vectors: int = 20_000, threads: int = 1, min_rebuild_tombstones: int = 1024) -> None:
        super().__init__(dim)
        for name, value in (("reduced_dim", reduced_dim), ("rerank_factor", rerank_factor),
                            ("train_size", train_size)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.reduced_dim, self.connectivity, self.expansion_add = int(reduced_dim), int(connectivity), int(expansion_add)
        self.expansion_search, self.rerank_factor = int(expansion_search), int(rerank_factor)
        self.train_size, self.max_train_vectors = int(train_size), int(max_train_vectors)
        self.threads, self.min_rebuild_tombstones = int(threads), int(min_rebuild_tombstones)
        self._vectors = np.zeros((16, self.dim), np.float32)  # (capacity, dim) full vector of each node
        self._ids = np.empty(0, dtype=np.int64)  # (nodes,) identity id of each node, NO_ID = tombstone
        self._node_of: dict[int, int] = {}
        self._graph: faiss.IndexHNSWSQ | None = None  # None until train_size vectors are held
        self._projection: np.ndarray | None = None  # (dim, reduced_dim) float32, None: not projected
        self._params: faiss.SearchParametersHNSW | None = None  # for _params_ef and the live nodes; None: stale
        self._params_ef = 0
        self._live_bitmap: np.ndarray | None = None  # packed "node is live" bits the selector in _params reads
        self._selector: faiss.IDSelectorBitmap | None = None

    def __len__(self) -> int:
        return len(self._node_of)

    @property
    def tombstones(self) -> int:
        """Nodes of removed or replaced vectors that searches skip."""
        return len(self._ids) - len(self._node_of)

    @property
    def trained(self) -> bool:
        """Whether the graph is built (``train_size`` vectors reached); before, searches are exact scans."""
        return self._graph is not None

    def _add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._bury(ids)
        first = len(self._ids)
        self._vectors = grown(self._vectors, first, first + len(ids))
        self._vectors[first:first + len(ids)] = vectors
        self._ids = np.concatenate([self._ids, ids])
        self._node_of.update(zip(ids.tolist(), range(first, first + len(ids))))
        self._params = None  # one live bit per node: the new nodes need theirs
        if self._graph is not None:
            self._call(self._graph.add, self._project(vectors))
        if not self._maybe_rebuild() and self._graph is None and len(self) >= self.train_size:
            self._rebuild()

    def _remove(self, ids: np.ndarray) -> None:
        self._bury(ids)
        self._maybe_rebuild()

    def _search(self, queries: np.ndarray, k: int, ids: np.ndarray, sims: np.ndarray) -> None:
        if self._graph is None:  # exact scan of every node (fewer than train_size live ones)
            nodes = np.arange(len(self._ids))[None, :]  # (1, nodes), the same for every query
            exact = queries @ self._vectors[: len(self._ids)].T  # (m, nodes) exact cosines
            exact[:, self._ids == NO_ID] = -np.inf  # tombstones
        else:  # the graph skips tombstones itself
            nodes = self._candidates(queries, k * self.rerank_factor)  # (m, candidates), -1 past those found
            if len(queries) == 1:  # one ROI (the identity space's call): a gather and a matrix-vector product
                exact = (self._vectors[nodes[0]] @ queries[0])[None]  # (1, candidates) exact cosines
            else:
                exact = np.einsum("md,mcd->mc", queries, self._vectors[nodes])  # (m, candidates) exact cosines
            exact[nodes < 0] = -np.inf  # -1 (fewer found) read the last row: masked here
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]  # (m, min(k, columns)) most similar first
        if len(queries) == 1:  # one ROI: plain indexing (a few array calls fewer than the general case)
            top, picked = exact[0, order[0]][None], self._ids[nodes[0, order[0]]][None]
        else:
            rows = np.arange(len(queries))[:, None]
            top = exact[rows, order]
            picked = self._ids[np.broadcast_to(nodes, exact.shape)[rows, order]]
        ids[:, : order.shape[1]] = np.where(np.isfinite(top), picked, NO_ID)
        sims[:, : order.shape[1]] = top

    def _candidates(self, queries: np.ndarray, count: int) -> np.ndarray:
        """(m, count) int64 graph nodes nearest each projected query, live ones only; -1 past those found."""
        efs = max(self.expansion_search, count)
        if self._params is None or self._params_ef != efs:  # kept between calls: building them costs ~30 us
            self._params, self._params_ef = faiss.SearchParametersHNSW(efSearch=efs), efs
            if self.tombstones:  # the bitmap and selector stay referenced here as long as the parameters
                self._live_bitmap = np.packbits(self._ids != NO_ID, bitorder="little")  # faiss's bit order
                self._selector = faiss.IDSelectorBitmap(len(self._ids), faiss.swig_ptr(self._live_bitmap))
                self._params.sel = self._selector
        _, nodes = self._call(self._graph.search, self._project(queries), count, params=self._params)
        return nodes

    def _project(self, vectors: np.ndarray) -> np.ndarray:
        """(n, dim) -> (n, reduced_dim) float32 C-contiguous (unchanged when not projected)."""
        return vectors if self._projection is None else np.ascontiguousarray(vectors @ self._projection)

    def _call(self, method, *args, **kwargs):
        """Run a faiss call with this index's OpenMP thread count for the calling thread."""
        faiss.omp_set_num_threads(self.threads or os.cpu_count() or 1)
        return method(*args, **kwargs)

    def _bury(self, ids: np.ndarray) -> None:
        """Turn the nodes of ``ids`` (those present) into tombstones."""
        nodes = [self._node_of.pop(key) for key in ids.tolist() if key in self._node_of]
        if nodes:
            self._ids[nodes] = NO_ID
            self._params = None

    def _maybe_rebuild(self) -> bool:
        """Rebuild when tombstones outnumber live nodes and ``min_rebuild_tombstones``; returns whether it did."""
        if self.tombstones <= max(len(self), self.min_rebuild_tombstones):
            return False
        self._rebuild()
        return True

    def _rebuild(self) -> None:
        """Keep only the live nodes; learn the projection and build the graph if ``train_size`` are held."""
        live = np.flatnonzero(self._ids != NO_ID)
        vectors = self._vectors[live]
        self._ids, self._params = self._ids[live], None
        self._node_of = dict(zip(self._ids.tolist(), range(len(live))))
        self._vectors = np.zeros((max(16, len(live)), self.dim), np.float32)
        self._vectors[: len(live)] = vectors
        self._graph = self._projection = None
        if len(live) < self.train_size:
            return
        if self.dim > self.reduced_dim:
            self._projection = uncentred_pca(vectors[: self.max_train_vectors], self.reduced_dim)
        projected = self._project(vectors)
        self._graph = faiss.IndexHNSWSQ(projected.shape[1], faiss.ScalarQuantizer.QT_8bit, self.connectivity,
                                        faiss.METRIC_INNER_PRODUCT)
        self._graph.hnsw.efConstruction = self.expansion_add
        self._call(self._graph.train, projected[: self.max_train_vectors])  # the 8-bit code ranges
        self._call(self._graph.add, projected)

"""Embedding head (``type: embedding``): re-identification against a gallery of identities.

:class:`EmbeddingHead` matches L2-normalised embeddings against an in-memory gallery of identities by cosine
similarity (re-identification: the same object seen again, on this or another camera, keeps its id).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vcascade.center.identity.vectors import EPS, l2_normalise  # noqa: F401  (EPS: heads API)
from vcascade.core.protocol.wire import EmbeddingOutput, Roi


class EmbeddingHead:
    """Cosine-similarity gallery of identities with enrolment and least-recently-matched eviction.

    Each identity's gallery vector is the L2-normalised running mean of the unit embeddings matched to it
    (we keep the sum of unit vectors; normalising the sum equals normalising the mean). The mean is the
    maximum-likelihood prototype of a von Mises-Fisher cluster; it is stable against single bad crops, unlike
    replacing the vector with the latest embedding. It does not forget slow appearance drift; an exponential
    moving average would, at the price of one more parameter.

    Not thread-safe: call it from one thread only (the worker's head thread).

    Args:
        match_threshold: cosine similarity at or above which the best identity matches, -1..1.
        max_identities: gallery capacity; enrolling beyond it evicts the least recently matched identity.

    Raises:
        ValueError: ``max_identities < 1``.
    """

    input_ndim = 2
    """Takes (n, D) embeddings (see :class:`vcascade.center.heads.base.Head`)."""

    def __init__(self, match_threshold: float, max_identities: int) -> None:
        if max_identities < 1:
            raise ValueError(f"max_identities must be >= 1, got {max_identities}")
        self.match_threshold = float(match_threshold)
        self.max_identities = int(max_identities)
        self._sums: np.ndarray | None = None  # (capacity, D) float32, sum of matched unit embeddings
        self._gallery: np.ndarray | None = None  # (capacity, D) float32, unit rows
        self._ids = np.full(self.max_identities, -1, dtype=np.int64)  # -1 = free slot
        self._size = 0  # slots in use: always the first ones (enrolment fills the lowest free slot, never frees)
        self._last_seen = np.zeros(self.max_identities, dtype=np.int64)  # tick of last match or enrolment
        self._tick = 0
        self._next_id = 0

    def __len__(self) -> int:
        """Number of identities in the gallery."""
        return self._size

    def identities(self) -> list[int]:
        """Ids of the identities in the gallery (unordered)."""
        return [int(i) for i in self._ids[: self._size]]

    def close(self) -> None:
        """Nothing to release."""

    def __call__(self, embeddings: np.ndarray, rois: Sequence[Roi] | None = None) -> list[EmbeddingOutput]:
        """Match (or enrol) each row, in row order.

        Rows are processed sequentially, so two crops of the same new object in one micro-batch get the same
        id: the first enrols, the second matches it. Similarities against the gallery as it was at the call are
        computed in one matrix product over the slots in use (cost grows with the identities enrolled, not with
        ``max_identities``); those against slots changed earlier in the same call are recomputed.

        Args:
            embeddings: (n, D) float array (any scale; normalised here). D must not change between calls.

        Returns:
            One :class:`vcascade.core.protocol.wire.EmbeddingOutput` per row: identity id (>= 0), cosine similarity
            (-1..1; 1.0 when enrolled), enrolled.

        Raises:
            ValueError: not 2-D, or D differs from earlier calls.
        """
        units = self._check(embeddings)
        base = units @ self._gallery[: self._size].T  # (n, slots in use)
        touched: list[int] = []
        return [self._match_row(units[row], base[row], touched) for row in range(len(units))]

    def _check(self, embeddings: np.ndarray) -> np.ndarray:
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings must be (n, D), got shape {embeddings.shape}")
        dim = embeddings.shape[1]
        if self._gallery is None:
            self._sums = np.zeros((self.max_identities, dim), dtype=np.float32)
            self._gallery = np.zeros((self.max_identities, dim), dtype=np.float32)
        elif self._gallery.shape[1] != dim:
            raise ValueError(f"embedding size {dim} differs from the gallery's {self._gallery.shape[1]}")
        return l2_normalise(embeddings)

    def _match_row(self, unit: np.ndarray, sims: np.ndarray, touched: list[int]) -> EmbeddingOutput:
        if touched:  # slots enrolled earlier in this call lie past the end of ``sims``: extend, then recompute
            sims = np.concatenate([sims, np.empty(self._size - len(sims), np.float32)])
            sims[touched] = self._gallery[touched] @ unit
        self._tick += 1
        best = int(np.argmax(sims)) if len(sims) else -1
        if best >= 0 and sims[best] >= self.match_threshold:
            self._update(best, unit)
            touched.append(best)
            return EmbeddingOutput(int(self._ids[best]), float(sims[best]), False)
        slot = self._enrol(unit)
        touched.append(slot)
        return EmbeddingOutput(int(self._ids[slot]), 1.0, True)

    def _update(self, slot: int, unit: np.ndarray) -> None:
        self._sums[slot] += unit
        self._gallery[slot] = l2_normalise(self._sums[slot][None])[0]
        self._last_seen[slot] = self._tick

    def _enrol(self, unit: np.ndarray) -> int:
        if self._size < self.max_identities:
            slot = self._size
            self._size += 1
        else:
            slot = int(np.argmin(self._last_seen))  # full: evict the least recently matched
        self._ids[slot] = self._next_id
        self._next_id += 1
        self._sums[slot] = unit
        self._gallery[slot] = unit
        self._last_seen[slot] = self._tick
        return slot

"""Embedding vectors: L2 normalisation (cosine similarity is then a dot product)."""

from __future__ import annotations

import numpy as np

EPS = 1e-12
"""Floor on vector norms before dividing, so an all-zero embedding does not produce NaN."""


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation of an (n, D) array to float32 unit rows (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, EPS)

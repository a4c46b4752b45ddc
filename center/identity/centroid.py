"""How a look moves an identity's centroid: a running mean, or one that forgets (``identity.centroid_window``).

An identity keeps a vector sum and a count; its centroid is the L2-normalised sum. Without a window every look
adds itself and one to the count: the centroid is the mean of every look ever matched (the maximum-likelihood
prototype of a von Mises-Fisher cluster), which never forgets. An object met again day after day keeps adding
looks, and the looks other objects lent it by mistake stay for good: replays of one footage move centroids
between objects the first pass kept apart (docs/BENCHMARKS.md, "Returning objects").

With a window of ``W`` looks the count stops at ``W`` and each later look moves the mean by ``1/W`` of its
distance: an exponential moving average with weight ``1 - 1/W`` on the past, as trackers update a track's
appearance (JDE, Wang et al., "Towards Real-Time Multi-Object Tracking", ECCV 2020, and BoT-SORT, Aharon et al.
2022, use 0.9, a window of 10 looks). Written as an additive change of the sum (``delta_sum = unit - mean`` at
a full window), so the store adds every worker's changes as before and needs no new operation. A count above
``W`` is never lowered by a look, only no longer raised (the mean then moves by ``1/count``), so concurrent
workers can never take it below what the store holds; it exceeds ``W`` after a merge, or by the looks other
workers added within one sync interval while the window filled.
"""

from __future__ import annotations

import numpy as np


def look_delta(vector_sum: np.ndarray, count: int, unit: np.ndarray, window: int) -> tuple[np.ndarray, int]:
    """The change one look makes to an identity's ``(vector_sum, count)``.

    Args:
        vector_sum: float32 (D,) the identity's sum (``count`` times its mean).
        count: looks in the sum, >= 1.
        unit: float32 (D,) the look's unit embedding.
        window: looks the mean remembers (0: all of them).

    Returns:
        ``(delta_sum float32 (D,), delta_count)``: ``(unit, 1)`` below the window, else ``(unit - mean, 0)``.
    """
    if window <= 0 or count < window:
        return unit.astype(np.float32, copy=True), 1
    return (unit - vector_sum / count).astype(np.float32), 0

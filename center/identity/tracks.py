"""Track aggregates: a track's looks combined into one embedding, which the identity space matches and enrols.

A track (one object followed by an edge's tracker on one camera, keyed by ``(camera, track_id)`` as its ROIs carry
them) gives several looks of one object. Matching each crop alone lets one poor look (small, blurred, occluded)
enrol a new identity or match another object; re-identification in trackers matches the track instead:
DeepStream's NvDCF tracker keeps a per-target gallery of re-id features and compares their aggregate, BoT-SORT and
StrongSORT keep one appearance vector per track updated by every confident detection. Here a track's aggregate
is the **quality-weighted mean** of its looks' unit embeddings (the weight is the detector's confidence: Deep
OC-SORT's dynamic appearance, Maggiolino et al. 2023, trusts a look in proportion to its detection score),
**outliers rejected** by sigma clipping: once the track has :data:`MIN_LOOKS_FOR_CLIPPING` accepted looks, a look
whose cosine with the current mean lies more than ``outlier_sigma`` standard deviations below the mean cosine of
the accepted looks (Welford's running moments) is left out of the mean (it is still answered). A run of
:data:`RESTART_AFTER_OUTLIERS` rejected looks in a row means the tracker moved the id onto another object (an id
switch): the aggregate restarts from the latest look.

Bounded: at most ``capacity`` tracks (the least recently seen forgotten first) and none unseen for ``ttl_s`` of
wall time. Not thread-safe: the identity space calls it under its lock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from vcascade.center.identity.vectors import l2_normalise

NO_IDENTITY = -1
"""A track bound to no identity yet."""
MIN_LOOKS_FOR_CLIPPING = 3
"""Accepted looks a track needs before outliers are rejected (the spread of fewer is no estimate)."""
MIN_SIGMA = 0.05
"""Floor of the cosine spread used for clipping: a track of near-identical looks rejects only a clearly other one."""
RESTART_AFTER_OUTLIERS = 3
"""Rejected looks in a row after which the aggregate restarts from the latest one (the track changed object)."""
MIN_WEIGHT = 0.05
"""Least weight of a look (a detection score of 0 still counts a little)."""

TrackKey = tuple[str, int]
"""``(camera, track_id)``: a track of one camera's tracker."""


@dataclass
class TrackState:
    """One track's aggregate and the identity it is bound to.

    Attributes:
        vector_sum: float32 (D,) weighted sum of its accepted unit looks.
        weight: sum of their weights.
        looks: looks seen (accepted or not).
        identity: the identity it is bound to (:data:`NO_IDENTITY`: none yet).
        enrolled: the identity this track enrolled (:data:`NO_IDENTITY`: it matched one instead).
        wall_s: wall time of its latest look, s.
    """

    vector_sum: np.ndarray
    weight: float
    looks: int = 1
    identity: int = NO_IDENTITY
    enrolled: int = NO_IDENTITY
    wall_s: float = 0.0
    accepted: int = 1
    rejected_in_row: int = 0
    _sim_mean: float = 0.0
    _sim_m2: float = 0.0
    _sims: int = field(default=0)

    def mean(self) -> np.ndarray:
        """float32 (D,) unit aggregate embedding (the normalised weighted mean)."""
        return l2_normalise(self.vector_sum[None])[0]

    def take(self, unit: np.ndarray, weight: float, outlier_sigma: float) -> bool:
        """Add a look unless it is an outlier; True when it was added (or the aggregate restarted from it)."""
        self.looks += 1
        sim = float(self.mean() @ unit)
        if self.accepted >= MIN_LOOKS_FOR_CLIPPING and self._sims:
            sigma = max(MIN_SIGMA, math.sqrt(self._sim_m2 / self._sims))
            if sim < self._sim_mean - outlier_sigma * sigma:
                self.rejected_in_row += 1
                if self.rejected_in_row < RESTART_AFTER_OUTLIERS:
                    return False
                self.vector_sum, self.weight, self.accepted = unit * weight, weight, 1
                self._sim_mean = self._sim_m2 = 0.0
                self._sims = self.rejected_in_row = 0
                return True
        self.rejected_in_row = 0
        self.vector_sum = self.vector_sum + unit * weight
        self.weight += weight
        self.accepted += 1
        self._sims += 1  # Welford's update of the mean and squared deviations of the cosines
        delta = sim - self._sim_mean
        self._sim_mean += delta / self._sims
        self._sim_m2 += delta * (sim - self._sim_mean)
        return True


class TrackBook:
    """The live tracks of the ROIs a worker answered, each with its :class:`TrackState`; bounded.

    Args:
        capacity: tracks kept at most (least recently seen forgotten first), >= 1.
        ttl_s: a track unseen for this long (wall time, s) is forgotten.
        outlier_sigma: clipping bound in standard deviations of the looks' cosines to the aggregate.
    """

    def __init__(self, capacity: int, ttl_s: float, outlier_sigma: float) -> None:
        self.capacity, self.ttl_s, self.outlier_sigma = int(capacity), float(ttl_s), float(outlier_sigma)
        self._tracks: OrderedDict[TrackKey, TrackState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tracks)

    def look(self, key: TrackKey, unit: np.ndarray, score: float, wall_s: float) -> tuple[TrackState, bool]:
        """Add one look (unit float32 (D,), detection score 0..1) to its track, made if new.

        Returns:
            The track's state and whether the look was accepted into its aggregate (False: an outlier).
        """
        self._expire(wall_s)
        weight = max(MIN_WEIGHT, float(score))
        state = self._tracks.pop(key, None)
        if state is None or state.vector_sum.shape != unit.shape:
            state, accepted = TrackState(unit * weight, weight, wall_s=wall_s), True
        else:
            accepted = state.take(unit, weight, self.outlier_sigma)
            state.wall_s = max(state.wall_s, wall_s)
        self._tracks[key] = state  # most recent last
        while len(self._tracks) > self.capacity:
            self._tracks.popitem(last=False)
        return state, accepted

    def rebind(self, old: int, new: int) -> None:
        """Tracks bound to (or enrolled as) ``old`` now name ``new`` (``old`` was merged into it)."""
        for state in self._tracks.values():
            if state.identity == old:
                state.identity = new
            if state.enrolled == old:
                state.enrolled = new

    def _expire(self, now_s: float) -> None:
        while self._tracks:
            key, state = next(iter(self._tracks.items()))
            if now_s - state.wall_s < self.ttl_s:
                break
            del self._tracks[key]

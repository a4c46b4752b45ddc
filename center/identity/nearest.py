"""The identities most similar to a query embedding (by the centroid index, among a camera topology's candidates,
or by centroid and gallery exemplars), and the earlier identity a newly landed enrolment duplicates.

A mixin of :class:`vcascade.center.identity.space.IdentitySpace` (it reads the space's slots, vector index,
topology and gallery, under the space's lock). An identity's similarity to a query is its centroid's cosine, or
with a gallery (:mod:`.gallery`) the largest of its centroid's and its exemplars' cosines.
"""

from __future__ import annotations

import numpy as np

from vcascade.center.identity.slots import UNUSED
from vcascade.center.identity.store import Sighting
from vcascade.center.identity.topology import UNKNOWN

NO_IDENTITY = -1
"""No identity (the answer when there is none); never an identity id."""

DUPLICATE_CANDIDATES = 8
"""Nearest identities searched (by centroid, then by enrolment embedding) for what a newly landed enrolment
duplicates (itself and later enrolments included, then skipped)."""

Found = tuple[int, float]
"""``(identity id or NO_IDENTITY, cosine similarity; -1.0 for none)``."""


class Nearest:
    """Nearest-identity search for :class:`vcascade.center.identity.space.IdentitySpace`."""

    def _best(self, unit: np.ndarray, seen: Sighting) -> tuple[Found, Found, int]:
        """The most similar identity to ``unit`` (float32 (D,), unit) and the runner-up, and the comparisons
        made (exemplars count one each)."""
        pruned = self.topology is not None and self.topology.code(seen.camera) != UNKNOWN
        if self.gallery is None and not pruned:
            slots, sims = self._index.search(unit[None], 2)
            found = [(int(self._ids[slot]), float(sim)) for slot, sim in zip(slots[0].tolist(), sims[0].tolist())
                     if slot >= 0]  # fmt: skip
            return (*self._pad(found), len(self._slot))
        used = np.flatnonzero(self._ids[: len(self._seen)] != UNUSED)
        if pruned:
            used = used[self.topology.candidates(seen.camera, seen.t_ms / 1000.0, self._codes[used], self._t_s[used])]
        sims = self._units[used] @ unit
        compared = len(used)
        if self.gallery is not None:
            sims = np.maximum(sims, self.gallery.scores(unit, len(self._seen))[used])
            compared += self.gallery.rows(used)
        top = np.argpartition(-sims, 1)[:2] if len(sims) > 2 else np.arange(len(sims))
        top = top[np.argsort(-sims[top])]
        return (*self._pad([(int(self._ids[used[i]]), float(sims[i])) for i in top]), compared)

    @staticmethod
    def _pad(found: list[Found]) -> tuple[Found, Found]:
        found = found + [(NO_IDENTITY, -1.0)] * (2 - len(found))
        return found[0], found[1]

    def _duplicates(self, landed: list[int]) -> list[tuple[int, int]]:
        """For each enrolment in ``landed`` (in landing order): the identity of the copy it duplicates, if any.

        Candidates landed earlier than it (later ones are checked in their own turn; enrolments not landed yet,
        when theirs lands). Score: the larger of the enrolment embedding's cosine with the candidate's centroid
        and with the candidate's enrolment embedding; the best at or above ``match_threshold`` is the survivor
        (followed through the merges decided before it in this pull)."""
        pairs: list[tuple[int, int]] = []
        into: dict[int, int] = {}
        for ident in landed:
            slot = self._slot.get(ident)
            if slot is None:
                continue
            best, best_sim = NO_IDENTITY, self.match_threshold
            for index in (self._index, self._first_index):
                slots, sims = index.search(self._firsts[slot][None], DUPLICATE_CANDIDATES)
                for other, sim in zip(slots[0].tolist(), sims[0].tolist()):
                    if other >= 0 and sim >= best_sim and self._landed[other] < self._landed[slot]:
                        best, best_sim = int(self._ids[other]), sim
            if best != NO_IDENTITY:
                while best in into:
                    best = into[best]
                into[ident] = best
                pairs.append((ident, best))
        return pairs

"""How the identity space answers a tracked ROI: by its track's aggregate (:mod:`.tracks`), not the crop alone.

A mixin of :class:`vcascade.center.identity.space.IdentitySpace` (it uses the space's slots, index and pending
exchange with the store, under the space's lock): the crop's own best match is kept for the result line; the track's
aggregate, this look included unless it is an outlier, is what matches, enrols, and moves (docs/IDENTITY.md,
"Identities from tracks").
"""

from __future__ import annotations

import numpy as np

from vcascade.center.identity.store import Sighting
from vcascade.center.identity.tracks import NO_IDENTITY, TrackKey, TrackState
from vcascade.core.protocol.wire import EmbeddingOutput


class TrackMatching:
    """Tracked-ROI matching for :class:`vcascade.center.identity.space.IdentitySpace`.

    Rules, for one look of a track:

    * the aggregate is searched (the crop alone on a track's first look);
    * the identity the edge last got for the track (the ROI's ``track_identity_id``: another worker's answer)
      binds a track this worker has not bound yet, and replaces an identity the track enrolled here when it
      reached the store earlier; one this worker's copy does not hold yet is answered as it is, provisional,
      without the look (the next sync brings it);
    * a track bound to nothing matches the most similar identity at or above ``track_threshold`` (at or above
      ``match_threshold`` while its aggregate is one look: that is a crop, and a crop has the crop's bar), else
      enrols one with its aggregate: a track enrols at most once while it matches nothing;
    * a track bound to an identity it matched moves to another only when its aggregate is ``revise_margin`` more
      similar to that one (and at or above ``track_threshold``): hysteresis against flip-flopping between two;
    * a track bound to the identity it enrolled (whose centroid follows the track's own looks) moves as soon as
      its aggregate matches another identity that reached the store earlier, at or above ``track_threshold``, and the
      enrolled identity is folded into it: here at once when its enrolment was never pushed, else by the store
      (``SyncNews.revised``). Earlier only: two workers whose halves of one track enrolled two identities
      would otherwise each move to the other's; like the duplicate merge, the later enrolment gives way.

    ``track_threshold`` is the aggregate's own: a mean of looks is closer to every centroid than one look is (the
    looks' noise averages out, the component they share with every object stays), so it needs a higher bar than
    a crop (measured: tools/bench_reid.py, docs/BENCHMARKS.md). A track's first look is no mean: held to the
    aggregate's bar it enrolled objects the crop alone would have matched, and with several workers (each seeing
    part of a track before any answer is back) each worker enrolled its part.

    The identity matched gets the look (when accepted into the aggregate), so every identity's centroid is the
    mean of the accepted looks of the tracks bound to it.
    """

    def _match_track_row(self, unit: np.ndarray, seen: Sighting, key: TrackKey, score: float, carried: int,
                         stats) -> EmbeddingOutput:  # fmt: skip
        """A tracked ROI: the crop's own best match is kept for the line; the track's aggregate (this look
        included unless it is an outlier) decides (:meth:`_decide`).

        Args:
            unit: float32 (D,) the look's unit embedding. seen: its sighting. key: its ``(camera, track_id)``.
            score: its detection confidence, 0..1. carried: the identity the edge last got for the track (the
            ROI's ``track_identity_id``; -1: none). stats: the call's ``MatchStats``, updated here.
        """
        (crop_best, crop_sim), crop_second, compared = self._best(unit, seen)
        state, accepted = self.tracks.look(key, unit, score, seen.wall_s)
        aggregate = state.mean()
        found = self._best(aggregate, seen) if state.looks > 1 else ((crop_best, crop_sim), crop_second, 0)
        stats.comparisons += compared + found[2]
        if state.identity != NO_IDENTITY and state.identity not in self._slot:
            state.identity = NO_IDENTITY  # evicted meanwhile (merges rebind: :meth:`IdentitySpace.apply`)
        revised_from = state.identity
        best, similarity, runner_up, enrolled = self._decide(state, aggregate, found[0], found[1], carried, seen)
        revised_from = revised_from if revised_from not in (NO_IDENTITY, best) else NO_IDENTITY
        if revised_from != NO_IDENTITY:
            stats.revisions += 1
            stats.folded += self._retire(state, revised_from, best)
        stats.enrolments += enrolled
        stats.matches += not enrolled
        if not enrolled and accepted and best in self._slot:
            self._observe(best, unit, seen)
        second, second_sim = runner_up if runner_up[1] >= self.match_threshold and runner_up[0] != best \
            else (NO_IDENTITY, -1.0)
        crop_ok = crop_best != NO_IDENTITY and crop_sim >= self.match_threshold
        provisional = best < 0 or not self.in_sync or best not in self._slot
        return EmbeddingOutput(
            best, float(similarity), enrolled, provisional, tuple(self._unreported.pop(best, ())),
            second, None if second == NO_IDENTITY else float(second_sim),
            crop_best if crop_ok else NO_IDENTITY, float(crop_sim) if crop_ok else None, state.looks, revised_from)

    def _decide(self, state: TrackState, aggregate: np.ndarray, best: tuple[int, float],
                runner_up: tuple[int, float], carried: int, seen: Sighting) -> tuple[int, float, tuple[int, float], bool]:
        """The track's identity after this look (binding ``state`` to it): ``(id, similarity, runner-up,
        enrolled)``. ``best`` and ``runner_up``: the aggregate's two most similar identities."""
        bound, (candidate, similarity) = state.identity, best
        if carried >= 1 and carried != bound:  # another worker's answer for this track, through the edge
            if carried not in self._slot:  # not in this copy yet: answer it (provisional), bind when it comes
                if bound == NO_IDENTITY:
                    return carried, -1.0, (NO_IDENTITY, -1.0), False
            elif bound == NO_IDENTITY or (state.enrolled == bound and self._earlier(carried, bound)):
                state.identity = carried
                return carried, self._similarity(carried, aggregate), runner_up, False
        if bound == NO_IDENTITY:
            if candidate != NO_IDENTITY and similarity >= self._binding_threshold(state):
                state.identity = candidate
                return candidate, similarity, runner_up, False
            state.identity = state.enrolled = self._enrol(aggregate, seen)
            return state.identity, 1.0, (NO_IDENTITY, -1.0), True
        bound_sim = self._similarity(bound, aggregate)
        if candidate == bound and state.enrolled == bound:  # its own enrolment follows it: does another match?
            (candidate, similarity), bound_sim = runner_up, -1.0
            if candidate != NO_IDENTITY and not self._earlier(candidate, bound):
                candidate = NO_IDENTITY  # enrolled after its own: that one moves to this one, never both ways
        if candidate not in (NO_IDENTITY, bound) and similarity >= max(self.track_threshold,
                                                                       bound_sim + self.revise_margin):
            state.identity = candidate
            return candidate, similarity, runner_up, False
        return bound, self._similarity(bound, aggregate), runner_up, False

    def _binding_threshold(self, state: TrackState) -> float:
        """The bar a track bound to nothing must reach: the crop's while its aggregate is one accepted look (its
        first, or the latest after a restart), the aggregate's once it is a mean of several."""
        return self.match_threshold if state.accepted <= 1 else self.track_threshold

    def _similarity(self, ident: int, unit: np.ndarray) -> float:
        return float(self._units[self._slot[ident]] @ unit)

    def _earlier(self, ident: int, than: int) -> bool:
        """Whether ``ident``'s enrolment reached the store before ``than``'s (one not landed yet is the latest;
        between two not landed, this worker's earlier enrolment: its ids are used in order, provisional ids count
        down)."""
        return (int(self._landed[self._slot[ident]]), abs(ident)) < (int(self._landed[self._slot[than]]), abs(than))

    def _retire(self, state: TrackState, old: int, new: int) -> bool:
        """A track left ``old`` for ``new``: an identity it enrolled itself goes into ``new`` (here at once when
        its enrolment was never pushed: True; else by the store, :attr:`SyncNews.revised`)."""
        if state.enrolled != old or old not in self._slot:
            return False
        state.enrolled = NO_IDENTITY
        if old in self._enrolled:  # never pushed (provisional ids included): the store never hears of it
            self._fold(old, new)
            return True
        self._revised.append((old, new))
        return False


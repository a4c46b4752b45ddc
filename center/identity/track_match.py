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
    * a track bound to nothing matches the most similar identity at or above ``match_threshold``, else enrols
      one with its aggregate: a track enrols at most once while it matches nothing;
    * a track bound to an identity it matched moves to another only when its aggregate is ``revise_margin`` more
      similar to that one (and at or above the threshold): hysteresis against flip-flopping between two;
    * a track bound to the identity it enrolled (whose centroid follows the track's own looks) moves as soon as
      its aggregate matches another identity at or above the threshold, and the enrolled identity is folded into
      it: here at once when its enrolment was never pushed, else by the store (``SyncNews.revised``).

    The identity matched gets the look (when accepted into the aggregate), so every identity's centroid is the
    mean of the accepted looks of the tracks bound to it.
    """

    def _match_track_row(self, unit: np.ndarray, seen: Sighting, key: TrackKey, score: float,
                         stats) -> EmbeddingOutput:  # fmt: skip
        """A tracked ROI: the crop's own best match is kept for the line; the track's aggregate (this look
        included unless it is an outlier) is matched, and enrols only when it matches nothing and the track is
        bound to nothing. A bound track moves to another identity only when its aggregate is ``revise_margin``
        more similar to it; an identity the track had enrolled then is folded into that one.

        Args:
            unit: float32 (D,) the look's unit embedding. seen: its sighting. key: its ``(camera, track_id)``.
            score: its detection confidence, 0..1. stats: the call's ``MatchStats``, updated here.
        """
        (crop_best, crop_sim), _, compared = self._best(unit, seen)
        state, accepted = self.tracks.look(key, unit, score, seen.wall_s)
        aggregate = state.mean()
        (best, similarity), runner_up, more = self._best(aggregate, seen) if state.looks > 1 else \
            ((crop_best, crop_sim), _, 0)
        stats.comparisons += compared + more
        bound, revised_from, enrolled = state.identity, NO_IDENTITY, False
        if bound != NO_IDENTITY and bound not in self._slot:
            bound = state.identity = NO_IDENTITY  # evicted meanwhile (merges rebind, :meth:`apply`)
        if bound != NO_IDENTITY:
            bound_sim = float(self._units[self._slot[bound]] @ aggregate)
            if best == bound and state.enrolled == bound:  # its own enrolment follows it: does another match?
                (best, similarity), bound_sim = runner_up, -1.0
            if best not in (NO_IDENTITY, bound) and similarity >= max(self.match_threshold,
                                                                     bound_sim + self.revise_margin):
                revised_from, state.identity = bound, best
                stats.revisions += 1
                stats.folded += self._retire(state, bound, best)
            else:
                best, similarity = bound, float(self._units[self._slot[bound]] @ aggregate)
        elif best != NO_IDENTITY and similarity >= self.match_threshold:
            state.identity = best
        else:
            best, similarity, enrolled = self._enrol(aggregate, seen), 1.0, True
            state.identity = state.enrolled = best
            runner_up = (NO_IDENTITY, -1.0)
        if enrolled:
            stats.enrolments += 1
        else:
            stats.matches += 1
            if accepted:
                self._observe(best, unit, seen)
        second, second_sim = runner_up if runner_up[1] >= self.match_threshold and runner_up[0] != best \
            else (NO_IDENTITY, -1.0)
        crop_ok = crop_best != NO_IDENTITY and crop_sim >= self.match_threshold
        return EmbeddingOutput(
            best, float(similarity), enrolled, best < 0 or not self.in_sync, tuple(self._unreported.pop(best, ())),
            second, None if second == NO_IDENTITY else float(second_sim),
            crop_best if crop_ok else NO_IDENTITY, float(crop_sim) if crop_ok else None, state.looks, revised_from)

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


"""A worker's local copy of its recognizer's identity space: matching, enrolment, and what the sync exchanges.

Matching (the head thread) only ever touches this copy, under a short lock; the store is reached by the sync
thread (:mod:`vcascade.center.identity.sync`), which hands this class the store's changes and takes its news.

* **Match**: a ROI's unit embedding is compared with the candidate identities (every identity, through the vector
  index; or, with a camera topology, those that could have reached the ROI's camera: :mod:`.topology`). The most
  similar at or above ``match_threshold`` matches: its sum of unit embeddings grows by this one (the centroid is
  the normalised sum) and its last sighting moves here. Rows are processed in order, so two crops of one new
  object in one micro-batch get one identity.
* **Enrol**: otherwise the ROI enrols a new identity, with an id from the block the sync reserved in the store.
  When that block is empty (the store is away) the id is *provisional*: negative (from -2 down; -1 means "no
  identity" to the edge), local to this worker, and replaced by a store id when the store is back (the first
  result naming the store id lists the provisional one in ``merged_from``).
* **Merge**: every worker checks every enrolment once, in the first pull that brings it (its own too): its
  enrolment embedding (the first crop's, which never drifts) against each identity of the copy that landed
  earlier, by centroid and by enrolment embedding. At or above ``match_threshold`` it is a duplicate (its
  worker's copy lacked that identity or another worker's matches of it) and is merged into the most similar in
  the store; every worker drops it, and the next result naming the survivor lists it in ``merged_from``. Counted
  in store versions, not seconds; an identity is only ever merged away when it lands: no snowball
  (docs/IDENTITY.md, "Merge").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from vcascade.center.identity.centroid import look_delta
from vcascade.center.identity.gallery import Gallery
from vcascade.center.identity.nearest import NO_IDENTITY, Nearest
from vcascade.center.identity.slots import NOT_LANDED, IdentitySlots
from vcascade.center.identity.store import LIVE, MERGED, Sighting, StoredIdentity, StoreWrite, add_sighting
from vcascade.center.identity.topology import Topology
from vcascade.center.identity.track_match import TrackMatching
from vcascade.center.identity.tracks import TrackBook, TrackKey
from vcascade.center.identity.vectors import l2_normalise
from vcascade.core.protocol.wire import EmbeddingOutput

FIRST_PROVISIONAL_ID = -2
"""Provisional ids count down from here (-1 is the edge's "no identity")."""


@dataclass
class _Delta:
    """Matches of one identity not yet pushed to the store."""

    vector_sum: np.ndarray
    count: int
    seen: Sighting
    exemplars: list[np.ndarray] = field(default_factory=list)  # looks its gallery kept (:mod:`.gallery`)


@dataclass
class MatchStats:
    """What one :meth:`IdentitySpace.match` call did, for the metrics.

    Attributes:
        matches: ROIs that matched an identity. enrolments: ROIs that enrolled one (provisional ones included).
        provisional: ROIs answered with a provisional result. comparisons: embedding comparisons made.
        revisions: tracks whose identity changed. folded: identities a track had enrolled and left before they
            reached the store, folded into the one it moved to here.
    """

    matches: int = 0
    enrolments: int = 0
    provisional: int = 0
    comparisons: int = 0
    revisions: int = 0
    folded: int = 0


@dataclass
class SyncNews:
    """What :meth:`IdentitySpace.apply` learnt from the store's changes.

    Attributes:
        duplicates: ``(loser, survivor)`` pairs: an enrolment that landed since the previous pull and the
            earlier-landed identity it duplicates (at or above the match threshold), in landing order.
        revised: ``(loser, survivor)`` pairs: an identity a track enrolled, then left for another when more looks
            moved its aggregate there (:mod:`.tracks`); the store folds it into that one.
        merged: identities this worker held that the store merged into another (by any worker).
        wrong_length: live records skipped: their vector's size is not the space's (the others are taken).
    """

    duplicates: list[tuple[int, int]] = field(default_factory=list)
    revised: list[tuple[int, int]] = field(default_factory=list)
    merged: int = 0
    wrong_length: int = 0


class IdentitySpace(TrackMatching, Nearest, IdentitySlots):
    """Local identities (slot arrays plus vector indexes, :class:`.slots.IdentitySlots`) with the pending exchange
    with the store. Thread-safe.

    Args:
        match_threshold: cosine similarity at or above which an identity matches, -1..1.
        capacity: identities kept locally at most; beyond, the least recently seen (wall time) is dropped here
            (the store evicts on its own, :meth:`vcascade.center.identity.store.IdentityStore.sweep`).
        index_kind: vector index kind (``exact`` or ``ann``, :func:`vcascade.center.identity.index.make_index`).
        topology: camera topology for pruning, or None to compare with every identity.
        tracks: the worker's track aggregates (tracked ROIs are matched and enrolled by their track's aggregate,
            :mod:`.tracks`), or None: every ROI is matched alone.
        revise_margin: how much more similar (cosine) another identity must be to a track's aggregate than the
            identity the track is bound to, for the track to move to it.
        track_threshold: cosine at or above which a track's aggregate matches an identity (None:
            ``match_threshold``).
        centroid_window: looks an identity's centroid remembers (:mod:`.centroid`; 0: every look).
        gallery: exemplars kept per identity and matched besides the centroid (:mod:`.gallery`), or None: the
            centroid alone.
    """

    def __init__(self, match_threshold: float, capacity: int, index_kind: str = "exact",
                 topology: Topology | None = None, tracks: TrackBook | None = None,
                 revise_margin: float = 0.0, track_threshold: float | None = None,
                 centroid_window: int = 0, gallery: Gallery | None = None) -> None:  # fmt: skip
        self.match_threshold = float(match_threshold)
        self.tracks, self.revise_margin = tracks, float(revise_margin)
        self.track_threshold = self.match_threshold if track_threshold is None else float(track_threshold)
        self._revised: list[tuple[int, int]] = []  # (enrolled by a track, what it moved to): for the store
        self.capacity = int(capacity)
        self.centroid_window = int(centroid_window)
        self.gallery = gallery
        self.in_sync = False  # set by the sync thread: the last exchange with the store succeeded
        self._loaded = False  # the first pull (the whole space) is applied
        self._lock = threading.Lock()
        super().__init__(index_kind, topology)
        self._pool: list[int] = []  # reserved store ids, used in order
        self._next_provisional = FIRST_PROVISIONAL_ID
        self._enrolled: set[int] = set()  # not yet pushed: enrolments (their whole state is pushed)
        self._deltas: dict[int, _Delta] = {}  # not yet pushed: matches of identities the store knows
        self._unreported: OrderedDict[int, list[int]] = OrderedDict()  # survivor -> merged ids not yet in a result

    def identities(self) -> list[int]:
        """Ids of the local identities (unordered)."""
        with self._lock:
            return list(self._slot)

    # ------------------------------------------------------------------ head thread

    def match(self, units: np.ndarray, sightings: list[Sighting], tracks: list[TrackKey | None] | None = None,
              scores: list[float] | None = None, carried: list[int] | None = None,
              ) -> tuple[list[EmbeddingOutput], MatchStats]:  # fmt: skip
        """Match or enrol each row, in order.

        Args:
            units: float32 (n, D), L2-normalised embeddings; D fixed by the first call or the first store record.
            sightings: one per row: the ROI's camera, time on the topology clock (ms) and wall time (s).
            tracks: one per row: the ROI's ``(camera, track_id)``, or None for an untracked ROI (matched alone);
                None: every row alone. Ignored without a track book.
            scores: one per row: the detector's confidence, 0..1 (a look's weight in its track's aggregate).
            carried: one per row: the identity the edge last got for the ROI's track (``track_identity_id``, -1:
                none).

        Returns:
            One :class:`vcascade.core.protocol.wire.EmbeddingOutput` per row, and the call's :class:`MatchStats`.

        Raises:
            ValueError: D differs from the space's.
        """
        stats = MatchStats()
        with self._lock:
            self._ensure_dim(units.shape[1])
            keys = tracks if tracks is not None and self.tracks is not None else [None] * len(units)
            weights = scores if scores is not None else [1.0] * len(units)
            knowns = carried if carried is not None else [NO_IDENTITY] * len(units)
            outputs = [self._match_row(unit, seen, stats) if key is None else
                       self._match_track_row(unit, seen, key, weight, known, stats)
                       for unit, seen, key, weight, known in zip(units, sightings, keys, weights, knowns)]  # fmt: skip
        stats.provisional = sum(out.provisional for out in outputs)
        return outputs, stats

    def _match_row(self, unit: np.ndarray, seen: Sighting, stats: MatchStats) -> EmbeddingOutput:
        (best, similarity), runner_up, compared = self._best(unit, seen)
        stats.comparisons += compared
        if best != NO_IDENTITY and similarity >= self.match_threshold:
            stats.matches += 1
            self._observe(best, unit, seen)
            ident, enrolled = best, False
        else:
            stats.enrolments += 1
            ident, similarity, enrolled = self._enrol(unit, seen), 1.0, True
            runner_up = (NO_IDENTITY, -1.0)
        provisional = ident < 0 or not self.in_sync
        merged = tuple(self._unreported.pop(ident, ()))
        second, second_similarity = runner_up if runner_up[1] >= self.match_threshold else (NO_IDENTITY, -1.0)
        crop = (NO_IDENTITY, None) if enrolled else (ident, float(similarity))
        return EmbeddingOutput(ident, float(similarity), enrolled, provisional, merged, second,
                               None if second == NO_IDENTITY else float(second_similarity), *crop)  # fmt: skip

    def _observe(self, ident: int, unit: np.ndarray, seen: Sighting) -> None:
        slot = self._slot[ident]
        kept = self.gallery is not None and self.gallery.add(slot, unit)
        change, added = look_delta(self._sums[slot], int(self._counts[slot]), unit, self.centroid_window)
        self._set(slot, ident, self._sums[slot] + change, self._counts[slot] + added, seen)
        if ident not in self._enrolled:
            delta = self._deltas.get(ident)
            if delta is None:
                delta = self._deltas[ident] = _Delta(change, added, seen)
            else:
                delta.vector_sum += change
                delta.count += added
                delta.seen = add_sighting(delta.seen, seen)
            if kept:
                delta.exemplars.append(unit.astype(np.float32, copy=True))

    def _enrol(self, unit: np.ndarray, seen: Sighting) -> int:
        if self._pool:
            ident = self._pool.pop(0)
        else:
            ident = self._next_provisional
            self._next_provisional -= 1
        slot = self._new_slot(ident)
        self._set(slot, ident, unit.copy(), 1, seen)
        self._set_enrolment(slot, unit, NOT_LANDED)
        if self.gallery is not None:
            self.gallery.reset(slot, unit)
        self._enrolled.add(ident)
        self._drop_least_recent()
        return ident

    # ------------------------------------------------------------------ sync thread

    def ids_wanted(self, block: int) -> int:
        """How many ids to reserve now: a block when less than half a block is left, plus one per provisional."""
        with self._lock:
            provisional = sum(1 for ident in self._enrolled if ident < 0)
            return (block if len(self._pool) < block / 2 else 0) + provisional

    def add_ids(self, ids: list[int]) -> list[tuple[int, int]]:
        """Take reserved store ids: first replace each provisional id, then keep the rest for enrolments.

        Returns:
            ``(provisional id, store id)`` per identity reconciled.
        """
        with self._lock:
            fresh = [ident for ident in ids if ident not in self._slot]
            reconciled = []
            for old in sorted((i for i in self._enrolled if i < 0), reverse=True):
                if not fresh:
                    break
                new = fresh.pop(0)
                self._rename(old, new)
                reconciled.append((old, new))
            self._pool.extend(fresh)
            return reconciled

    def take_writes(self) -> list[StoreWrite]:
        """The news for the store (enrolments with store ids first, then match deltas); cleared here (the sync
        keeps a push until the store answers it)."""
        with self._lock:
            enrolled = sorted(ident for ident in self._enrolled if ident >= 0)
            writes = [self._enrol_write(ident) for ident in enrolled]
            writes += [StoreWrite(ident, d.vector_sum, d.count, d.seen, False, None,
                                  np.stack(d.exemplars) if d.exemplars else None)
                       for ident, d in self._deltas.items()]  # fmt: skip
            self._enrolled.difference_update(enrolled)
            self._deltas.clear()
            return writes

    def apply(self, records: list[StoredIdentity], since_version: int) -> SyncNews:
        """Bring the local copy up to the store's changes: live identities take the store's sum (plus what this
        worker has not pushed yet), merged and evicted ones leave. Then check the enrolments that landed since
        the previous pull for duplicates (except in the first pull, which loads the space).

        Args:
            records: the store's changes after ``since_version`` (:meth:`IdentityStore.changes`).
            since_version: the store version this worker had pulled up to before.
        """
        news = SyncNews()
        with self._lock:
            landed = []  # (version, id): enrolments that reached the store since the previous pull
            self._settle_dim(records)
            for record in records:
                if record.state == LIVE and not self._fits(record):
                    news.wrong_length += 1
                elif record.state == LIVE:
                    if self._take_live(record) and self._loaded and record.enrolled_version > since_version:
                        landed.append((record.enrolled_version, record.identity_id))
                elif self._slot.get(record.identity_id) is not None:
                    news.merged += record.state == MERGED
                    if record.state == MERGED:  # its own unreported news (a provisional id it replaced) moves too
                        self._unreport(record.merged_into, [record.identity_id,
                                                            *self._unreported.pop(record.identity_id, [])])
                        if self.tracks is not None:
                            self.tracks.rebind(record.identity_id, record.merged_into)
                    self._remove(record.identity_id)
            news.duplicates = self._duplicates([ident for _, ident in sorted(landed)])
            news.revised, self._revised = self._revised, []
            self._loaded = True
        return news

    def _take_live(self, record: StoredIdentity) -> bool:
        ident = record.identity_id
        self._ensure_dim(len(record.vector_sum))
        total, count, seen = record.vector_sum, record.count, record.seen
        delta = self._deltas.get(ident)
        if delta is not None:
            total, count, seen = total + delta.vector_sum, count + delta.count, add_sighting(seen, delta.seen)
        slot = self._slot.get(ident)
        if slot is None:
            slot = self._new_slot(ident)
            self._set_enrolment(slot, l2_normalise(total[None])[0] if record.first is None else record.first,
                                record.enrolled_version)  # fmt: skip
        else:
            seen = add_sighting(self._seen[slot], seen)
            if self._landed[slot] != record.enrolled_version:  # this worker's own enrolment landed
                self._set_enrolment(slot, self._firsts[slot], record.enrolled_version)
        self._set(slot, ident, total.astype(np.float32), count, seen)
        if self.gallery is not None:  # the store's exemplars, then the ones not pushed yet
            pending = [np.stack(delta.exemplars)] if delta is not None and delta.exemplars else []
            others = ([] if record.exemplars is None else [record.exemplars]) + pending
            self.gallery.reset(slot, self._firsts[slot], np.concatenate(others) if others else None)
        self._drop_least_recent()
        return ident in self._slot

    # ------------------------------------------------------------------ changes of slots

    def _remove(self, ident: int) -> None:
        if self.gallery is not None and ident in self._slot:
            self.gallery.drop(self._slot[ident])
        self._release(ident)
        self._enrolled.discard(ident)

    def _rename(self, old: int, new: int) -> None:
        slot = self._slot[old]
        total, count, seen = self._sums[slot].copy(), int(self._counts[slot]), self._seen[slot]
        first = self._firsts[slot].copy()
        kept = None if self.gallery is None else self.gallery.exemplars(slot)
        self._remove(old)
        slot = self._new_slot(new)
        self._set(slot, new, total, count, seen)
        self._set_enrolment(slot, first, NOT_LANDED)
        if kept is not None:
            self.gallery.reset(slot, kept[0], kept[1:])
        self._enrolled.add(new)
        self._unreport(new, [old, *self._unreported.pop(old, [])])
        if self.tracks is not None:
            self.tracks.rebind(old, new)

    def _fold(self, old: int, new: int) -> None:
        """Fold the unpushed enrolment ``old`` into ``new`` here (its sum and count added; news of it moves to
        ``new``); its id is never used again."""
        slot, into = self._slot[old], self._slot[new]
        total, count = self._sums[into] + self._sums[slot], self._counts[into] + self._counts[slot]
        self._set(into, new, total, count, self._seen[into])
        kept = [] if self.gallery is None else [u for u in self.gallery.exemplars(slot) if self.gallery.add(into, u)]
        if new not in self._enrolled:
            delta = self._deltas.setdefault(new, _Delta(np.zeros_like(total), 0, self._seen[into]))
            delta.vector_sum += self._sums[slot]
            delta.count += int(self._counts[slot])
            delta.exemplars.extend(kept)
        self._remove(old)
        self._unreport(new, [old, *self._unreported.pop(old, [])])
        self.tracks.rebind(old, new)

    def _drop_least_recent(self) -> None:
        """Beyond capacity, forget the least recently seen identity here (the store keeps it)."""
        if len(self._slot) <= self.capacity:
            return
        pushed = [ident for ident in self._slot if ident not in self._enrolled]  # enrolments wait for their push
        if not pushed:
            return
        oldest = min(pushed, key=lambda i: self._seen[self._slot[i]].wall_s)
        self._deltas.pop(oldest, None)
        self._remove(oldest)

    def _unreport(self, survivor: int, merged: list[int]) -> None:
        self._unreported.setdefault(survivor, []).extend(merged)
        self._unreported.move_to_end(survivor)
        while len(self._unreported) > self.capacity:  # survivors never seen again: forget the oldest news
            self._unreported.popitem(last=False)

    def _enrol_write(self, ident: int) -> StoreWrite:
        slot = self._slot[ident]
        others = None if self.gallery is None else self.gallery.exemplars(slot)[1:]
        return StoreWrite(ident, self._sums[slot].copy(), int(self._counts[slot]), self._seen[slot], True,
                          self._firsts[slot].copy(), others if others is not None and len(others) else None)

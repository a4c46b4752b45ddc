"""Identities from tracks: a track's aggregate (quality-weighted mean, outliers clipped) is matched and enrolled,
the crop's own answer stays in the output, a track that more looks move to another identity says so and folds
the identity it had enrolled into it; two workers sharing a real SQLite store converge on one identity per track;
the track book is bounded."""

from __future__ import annotations

import time

import msgspec
import numpy as np
import pytest
from prometheus_client import REGISTRY

from vcascade.center.identity.head import IdentityHead
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import LIVE, Sighting
from vcascade.center.identity.sync import StoreSync
from vcascade.center.identity.tracks import TrackBook
from vcascade.core.protocol.wire import Roi
from vcascade.core.schema.center import EmbeddingHeadConfig

D = 16
THRESHOLD = 0.8


def unit(*weights: float, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """Unit vector with the given leading components, plus a little noise."""
    v = np.zeros(D, np.float32)
    v[: len(weights)] = weights
    v += noise * np.random.default_rng(seed).standard_normal(D).astype(np.float32)
    return v / np.linalg.norm(v)


def seen(camera: str = "cam1") -> Sighting:
    return Sighting(camera, 0.0, time.time())


def space(revise_margin: float = 0.02) -> IdentitySpace:
    return IdentitySpace(THRESHOLD, 1000, tracks=TrackBook(100, 60.0, 2.5), revise_margin=revise_margin)


def look(sp: IdentitySpace, vector: np.ndarray, track: int | None = 1, camera: str = "cam1", score: float = 0.9):
    (out,), stats = sp.match(vector[None], [seen(camera)], [None if track is None else (camera, track)], [score])
    return out


def test_the_aggregate_is_the_score_weighted_mean_and_clips_an_outlier():
    book = TrackBook(10, 60.0, 2.5)
    looks = [unit(1, 0.1 * k) for k in range(4)]
    for k, v in enumerate(looks):
        state, accepted = book.look(("c", 1), v, 0.5 + 0.1 * k, 0.0)
        assert accepted
    expected = sum(v * (0.5 + 0.1 * k) for k, v in enumerate(looks))
    np.testing.assert_allclose(state.mean(), expected / np.linalg.norm(expected), atol=1e-6)
    before = state.mean().copy()
    state, accepted = book.look(("c", 1), unit(0, 1), 0.9, 0.0)  # another object's look: rejected, still counted
    assert not accepted and state.looks == 5
    np.testing.assert_allclose(state.mean(), before, atol=1e-6)


def test_a_run_of_outliers_restarts_the_aggregate_on_the_new_object():
    book = TrackBook(10, 60.0, 2.5)
    for _ in range(4):
        book.look(("c", 1), unit(1), 0.9, 0.0)
    results = [book.look(("c", 1), unit(0, 1), 0.9, 0.0)[1] for _ in range(3)]
    assert results == [False, False, True]
    assert book.look(("c", 1), unit(0, 1), 0.9, 0.0)[0].mean() @ unit(0, 1) > 0.99


def test_the_book_is_bounded_by_capacity_and_time():
    book = TrackBook(3, 10.0, 2.5)
    for track in range(5):
        book.look(("c", track), unit(1), 0.9, 0.0)
    assert len(book) == 3
    book.look(("c", 9), unit(1), 0.9, 11.0)  # the others are 11 s old: expired
    assert len(book) == 1


def test_a_track_matches_as_a_whole_and_keeps_the_crop_answer():
    sp = space()
    first = look(sp, unit(1), track=None)  # an identity enrolled by an untracked ROI
    assert first.enrolled and first.track_looks == 0 and first.crop_identity_id == -1
    out = look(sp, unit(1, 0.1), track=5)
    assert (out.identity_id, out.enrolled, out.crop_identity_id, out.track_looks) == (first.identity_id, False,
                                                                                       first.identity_id, 1)
    poor = look(sp, unit(1, 0.9), track=5)  # alone it would not match (cos 0.74): the track still does
    assert poor.identity_id == first.identity_id and poor.crop_identity_id == -1 and poor.crop_similarity is None
    assert poor.track_looks == 2 and poor.identity_revised_from == -1
    assert len(sp) == 1


def test_more_looks_revise_a_track_and_fold_the_identity_it_enrolled():
    sp = space()
    known = look(sp, unit(1), track=None).identity_id
    bad = look(sp, unit(0.6, 0.8), track=7)  # a poor first look: cos 0.6 with the known object, enrols
    assert bad.enrolled and bad.identity_id != known
    answers = [look(sp, unit(1, 0.05, seed=k), track=7) for k in range(4)]
    moved = [a for a in answers if a.identity_revised_from != -1]
    assert len(moved) == 1 and moved[0].identity_revised_from == bad.identity_id
    assert moved[0].identity_id == known and moved[0].merged_from == (bad.identity_id,)
    assert answers[-1].identity_id == known and answers[-1].identity_revised_from == -1
    assert sp.identities() == [known]  # never pushed: folded here, its id skipped


def test_a_returning_object_on_a_new_track_enrols_nothing():
    sp = space()
    ids = {look(sp, unit(1, 0.05, seed=k), track=1).identity_id for k in range(5)}
    again = [look(sp, unit(1, 0.05, seed=10 + k), track=2, camera="cam2") for k in range(5)]
    assert len(ids) == 1 and {a.identity_id for a in again} == ids and not any(a.enrolled for a in again)


class Worker:
    made = 0

    def __init__(self, store) -> None:
        Worker.made += 1
        self.space = space()
        self.sync = StoreSync(self.space, store, IdentityTelemetry(f"tracks-{Worker.made}"), 0.05, 8, 86_400.0, 1000)
        self.sync.cycle()


@pytest.mark.parametrize("synced_between", [True, False])
def test_two_workers_sharing_a_track_converge_on_one_identity(tmp_path, synced_between):
    """A track's looks dealt to two workers in turn: whether the first enrolment reaches the other worker before
    it sees the track (a sync between) or not (both enrol: the duplicate merge folds one into the other), the
    track ends with one identity on both, and the store holds one."""
    path = tmp_path / "ids.sqlite"
    a, b = Worker(SqliteStore(path, "people")), Worker(SqliteStore(path, "people"))
    answers = []
    for k in range(6):
        worker = (a, b)[k % 2]
        answers.append(look(worker.space, unit(1, 0.05, seed=k), track=3))
        if synced_between or k >= 2:
            a.sync.cycle()
            b.sync.cycle()
    for _ in range(2):
        a.sync.cycle()
        b.sync.cycle()
    final = {look(w.space, unit(1, 0.05, seed=99), track=3).identity_id for w in (a, b)}
    assert len(final) == 1 and a.space.identities() == b.space.identities() == list(final)
    survivor = final.pop()
    assert all(out.identity_id == survivor or out.identity_id in {i for o in answers for i in o.merged_from}
               or not any(o.identity_id == survivor for o in answers[:k]) for k, out in enumerate(answers))
    records, _ = SqliteStore(path, "people").changes(0)
    assert [r.identity_id for r in records if r.state == LIVE] == [survivor]


def test_the_identity_the_edge_carries_binds_a_track_new_to_this_worker():
    """A worker that has not seen a track yet continues the identity another worker gave it (the ROI's
    ``track_identity_id``) instead of enrolling; one its copy does not hold yet is answered provisional."""
    sp = space()
    sp.add_ids(list(range(1, 9)))  # as reserved from a store
    known = look(sp, unit(1), track=None).identity_id
    (out,), _ = sp.match(unit(0.6, 0.8)[None], [seen()], [("cam1", 4)], [0.9], [known])  # alone: no match
    assert (out.identity_id, out.enrolled, out.track_looks) == (known, False, 1)
    (out,), _ = sp.match(unit(0, 0, 1)[None], [seen()], [("cam1", 5)], [0.9], [12345])
    assert (out.identity_id, out.enrolled, out.provisional) == (12345, False, True)
    assert len(sp) == 1


def test_the_head_matches_tracked_rois_by_their_track_when_tracks_are_enabled(tmp_path, monkeypatch):
    """``identity.tracks.enabled``: the worker's head hands the space each ROI's track, score and carried
    identity; the second look of track 3 (alone below the threshold) keeps the track's identity."""
    monkeypatch.setenv("VCASCADE_STATE_DIR", str(tmp_path))
    cfg = EmbeddingHeadConfig.model_validate({"identity": {"tracks": {"enabled": True, "match_threshold": 0.8}}})
    head = IdentityHead.from_config(cfg, "people", "w-tracks", store=SqliteStore(tmp_path / "ids.sqlite", "people"))
    try:
        rois = [Roi(roi_id=f"r{k}", camera="cam1", frame_seq=k, stream_ts_ms=40.0 * k, capture_unix_ms=0.0,
                    xyxy=(0.0, 0.0, 9.0, 9.0), crop_xyxy=(0, 0, 9, 9), class_id=0, score=0.9, track_id=3)
                for k in range(2)]
        first, second = head(np.stack([unit(1), unit(1, 0.9)]), rois)
        # a third look of another object's track: alone it enrols; more looks of object 1 move it there
        other = [msgspec.structs.replace(rois[0], roi_id=f"s{k}", track_id=4) for k in range(4)]
        moved = head(np.stack([unit(0.3, 0, 1)] + [unit(1, 0.05, seed=k) for k in range(3)]), other)
        assert moved[0].enrolled and any(out.identity_revised_from == moved[0].identity_id for out in moved)
        revisions = REGISTRY.get_sample_value("vcascade_identity_track_revisions_total", {"worker": "w-tracks"})
        assert revisions == 1.0
        assert first.enrolled and first.track_looks == 1
        assert (second.identity_id, second.enrolled, second.crop_identity_id, second.track_looks) == (
            first.identity_id, False, -1, 2)
        assert isinstance(head.space.tracks, TrackBook) and len(head.space.tracks) == 2
    finally:
        head.close()
    off = IdentityHead.from_config(EmbeddingHeadConfig(), "people", "w-plain",
                                   store=SqliteStore(tmp_path / "ids.sqlite", "people"))
    try:
        assert off.space.tracks is None  # the default: every ROI alone
    finally:
        off.close()


def test_a_tracks_first_look_is_held_to_the_crops_threshold_and_its_aggregate_to_the_tracks():
    """With ``tracks.match_threshold`` above the head's: a first look at cos 0.85 to a known identity matches it
    (as the crop alone would), a first look at cos 0.6 enrols."""
    sp = IdentitySpace(THRESHOLD, 1000, tracks=TrackBook(100, 60.0, 2.5), revise_margin=0.02, track_threshold=0.9)
    known = look(sp, unit(1), track=None).identity_id
    near = look(sp, unit(0.85, np.sqrt(1 - 0.85**2)), track=1)
    assert (near.identity_id, near.enrolled, near.crop_identity_id, near.track_looks) == (known, False, known, 1)
    far = look(sp, unit(0.6, 0.8), track=2)
    assert far.enrolled and far.identity_id != known

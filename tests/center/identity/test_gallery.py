"""Identity galleries: several exemplars per identity, kept in both stores and shared by every worker."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest
import redis
from prometheus_client import REGISTRY

from vcascade.center.identity.gallery import Gallery
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import LIVE, Sighting, StoreWrite
from vcascade.center.identity.sync import StoreSync

D = 16


def unit(*weights: float) -> np.ndarray:
    """A unit vector with ``weights`` on the first axes."""
    v = np.zeros(D, np.float32)
    v[: len(weights)] = weights
    return v / np.linalg.norm(v)


def axis(i: int) -> np.ndarray:
    v = np.zeros(D, np.float32)
    v[i] = 1.0
    return v


def seen(camera: str = "cam1") -> Sighting:
    return Sighting(camera, 0.0, time.time())


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """A function opening a new client of one shared store keeping ``exemplars`` looks per identity."""
    opened = []

    def open_one(exemplars: int = 2):
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "identity.sqlite3", "embedder", exemplars=exemplars)
        else:
            store = RedisStore(request.getfixturevalue("redis_server").url, "embedder", 2.0, exemplars=exemplars)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_a_gallery_keeps_its_enrolment_and_replaces_the_oldest_other_exemplar():
    gallery = Gallery(3)
    gallery.reset(0, axis(0))
    for i in (1, 2, 3):
        assert gallery.add(0, axis(i))
    np.testing.assert_array_equal(gallery.exemplars(0), np.stack([axis(0), axis(2), axis(3)]))
    scores = gallery.scores(axis(2), 2)
    assert scores[0] == pytest.approx(1.0) and scores[1] == -np.inf  # slot 1 holds nothing


def test_a_gallery_of_one_keeps_the_enrolment_embedding():
    gallery = Gallery(1)
    gallery.reset(0, axis(0), np.stack([axis(1)]))
    assert not gallery.add(0, axis(2))
    np.testing.assert_array_equal(gallery.exemplars(0), axis(0)[None])


def test_a_look_too_close_to_a_kept_exemplar_is_not_kept():
    gallery = Gallery(4, diversity=0.9)
    gallery.reset(0, axis(0))
    assert not gallery.add(0, unit(1.0, 0.1))  # cosine 0.995 with the enrolment
    assert gallery.add(0, unit(1.0, 1.0))  # cosine 0.707
    assert len(gallery.exemplars(0)) == 2
    gallery.drop(0)
    assert len(gallery.exemplars(0)) == 0 and gallery.rows(np.array([0])) == 0


def test_a_look_matches_an_earlier_look_that_the_centroid_has_averaged_away():
    """One object drifts from axis 0 to axis 1, each look within the threshold of the moving centroid; a look like
    the first ones (cosine 0.26 with the centroid by then) enrols anew without a gallery and matches the enrolment
    exemplar with one."""
    drift = [unit(1, .5), unit(1, 1), unit(.5, 1)] + [unit(.2, 1)] * 4 + [axis(1)] * 4
    plain, with_gallery = IdentitySpace(0.7, 100), IdentitySpace(0.7, 100, gallery=Gallery(8))
    for space in (plain, with_gallery):
        [first], _ = space.match(axis(0)[None], [seen()])
        outs, _ = space.match(np.stack(drift), [seen()] * len(drift))
        assert {out.identity_id for out in outs} == {first.identity_id}
    [again], _ = plain.match(unit(1.0, -0.1)[None], [seen()])
    [again_gallery], _ = with_gallery.match(unit(1.0, -0.1)[None], [seen()])
    assert again.enrolled  # the centroid alone no longer knows the first passage
    assert not again_gallery.enrolled and again_gallery.identity_id == first.identity_id
    assert again_gallery.similarity == pytest.approx(float(unit(1.0, -0.1) @ axis(0)))


def test_the_store_keeps_the_latest_exemplars_and_a_merge_appends_the_losers(open_store):
    store = open_store(exemplars=2)
    a, b = store.reserve_ids(2)
    store.write([StoreWrite(a, axis(0), 1, seen(), True, axis(0), np.stack([axis(1)])),
                 StoreWrite(b, axis(5), 1, seen(), True, axis(5), np.stack([axis(6)]))])
    store.write([StoreWrite(a, axis(2) + axis(3), 2, seen(), False, None, np.stack([axis(2), axis(3)]))])
    records = {r.identity_id: r for r in store.changes(0)[0] if r.state == LIVE}
    np.testing.assert_array_equal(records[a].exemplars, np.stack([axis(2), axis(3)]))  # axis(1) is the oldest
    np.testing.assert_array_equal(records[a].first, axis(0))
    assert store.merge(b, a)
    records = {r.identity_id: r for r in store.changes(0)[0] if r.state == LIVE}
    np.testing.assert_array_equal(records[a].exemplars, np.stack([axis(3), axis(6)]))
    assert store.write([StoreWrite(b, axis(7), 1, seen(), False, None, np.stack([axis(7)]))]) == 0  # to a
    np.testing.assert_array_equal({r.identity_id: r for r in store.changes(0)[0]}[a].exemplars,
                                  np.stack([axis(6), axis(7)]))


def test_a_store_keeping_no_exemplars_answers_none(open_store):
    store = open_store(exemplars=0)
    [a] = store.reserve_ids(1)
    store.write([StoreWrite(a, axis(0), 1, seen(), True, axis(0), np.stack([axis(1)]))])
    [record] = store.changes(0)[0]
    assert record.exemplars is None


def test_workers_share_each_others_exemplars_through_the_store(open_store):
    """Worker A's looks of an identity reach worker B's gallery: B then matches a look only A's exemplar is
    near, where B's centroid (pulled from the store too) and the enrolment embedding are not."""
    spaces = [IdentitySpace(0.7, 100, gallery=Gallery(4)) for _ in range(2)]
    syncs = [StoreSync(space, open_store(exemplars=3), IdentityTelemetry(f"gallery-{i}"), 0.05, 8, 86_400.0, 100)
             for i, space in enumerate(spaces)]  # fmt: skip
    try:
        for sync in syncs:
            sync.cycle()
        [enrolled], _ = spaces[0].match(axis(0)[None], [seen()])
        looks = [unit(1.0, 0.5), unit(1.0, 1.0)]  # each within 0.7 of the centroid before it
        outs, _ = spaces[0].match(np.stack(looks), [seen()] * 2)
        assert all(not out.enrolled for out in outs)
        for sync in syncs:
            sync.cycle()
        ident = enrolled.identity_id
        slot = spaces[1]._slot[ident]
        np.testing.assert_allclose(spaces[1].gallery.exemplars(slot), np.stack([axis(0), *looks]), atol=1e-6)
        query = unit(0.3, 1.0)  # 0.88 with the last look; 0.65 with the centroid, 0.29 with the enrolment
        assert float(spaces[1]._units[slot] @ query) < 0.7
        [answer], _ = spaces[1].match(query[None], [seen()])
        assert answer.identity_id == ident and not answer.enrolled
        assert answer.similarity == pytest.approx(float(query @ looks[1]), abs=1e-5)
    finally:
        for sync in syncs:
            sync.close()


def test_exemplars_that_are_not_whole_rows_make_their_record_malformed_and_the_others_still_sync(
        open_store, request, tmp_path):  # fmt: skip
    writer = open_store(exemplars=3)
    a, b = writer.reserve_ids(2)
    writer.write([StoreWrite(ident, axis(i), 1, seen(), True, axis(i), np.stack([axis(i + 1)]))
                  for ident, i in ((a, 0), (b, 4))])  # fmt: skip
    damaged = np.ones(D + 3, np.float32).tobytes()  # another program wrote it: not rows of D
    if isinstance(writer, SqliteStore):
        with sqlite3.connect(tmp_path / "identity.sqlite3") as db:
            db.execute("UPDATE identities SET exemplars = ? WHERE id = ?", (damaged, a))
    else:
        with redis.Redis.from_url(request.getfixturevalue("redis_server").url) as raw:
            raw.hset(f"vcascade:identity:embedder:id:{a}", "exemplars", damaged)
    space = IdentitySpace(0.8, 100, gallery=Gallery(4))
    telemetry = IdentityTelemetry(f"gallery-damage-{request.node.callspec.id}")
    sync = StoreSync(space, open_store(exemplars=3), telemetry, 0.05, 8, 86_400.0, 100)
    try:
        assert sync.cycle() and space.identities() == [b]
        np.testing.assert_array_equal(space.gallery.exemplars(space._slot[b]), np.stack([axis(4), axis(5)]))
        skipped = REGISTRY.get_sample_value("vcascade_identity_store_records_skipped_total",
                                            {"worker": telemetry.worker, "reason": "malformed"})  # fmt: skip
        assert skipped == 1
    finally:
        sync.close()

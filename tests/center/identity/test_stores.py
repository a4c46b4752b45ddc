"""Both identity store backends against the same contract: the real SQLite file and a real redis-server."""

from __future__ import annotations

import time

import numpy as np
import pytest

from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import EVICTED, LIVE, MERGED, WRITER_TTL_S, Sighting, StoreWrite

D = 8


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """A function opening a new client of one shared store (as a second worker would), closed after."""
    opened = []

    def open_one(space: str = "embedder"):
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "state" / "identity.sqlite3", space)
        else:
            server = request.getfixturevalue("redis_server")
            store = RedisStore(server.url, space, timeout_s=2.0)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def unit(i: int) -> np.ndarray:
    v = np.zeros(D, np.float32)
    v[i % D] = 1.0
    return v


def enrol(ident: int, i: int, wall_s: float = 100.0, camera: str = "cam1") -> StoreWrite:
    return StoreWrite(ident, unit(i), 1, Sighting(camera, 1000.0 * wall_s, wall_s), True)


def update(ident: int, i: int, wall_s: float, camera: str = "cam2") -> StoreWrite:
    return StoreWrite(ident, unit(i), 1, Sighting(camera, 1000.0 * wall_s, wall_s), False)


def live(store) -> dict[int, object]:
    records, _ = store.changes(0)
    return {r.identity_id: r for r in records if r.state == LIVE}


def test_ids_are_reserved_in_blocks_never_reused_across_clients(open_store):
    a, b = open_store(), open_store()
    ids = a.reserve_ids(4) + b.reserve_ids(4) + a.reserve_ids(2)
    assert len(set(ids)) == 10
    assert a.reserve_ids(1)[0] > max(ids)


def test_enrolment_then_update_adds_to_the_sum_and_keeps_the_latest_sighting(open_store):
    store = open_store()
    [ident] = store.reserve_ids(1)
    assert store.write([enrol(ident, 0, wall_s=100.0)]) == 0
    assert store.write([update(ident, 1, wall_s=101.0, camera="cam2")]) == 0
    assert store.write([update(ident, 1, wall_s=99.0, camera="cam3")]) == 0  # older sighting: sum only
    record = live(store)[ident]
    np.testing.assert_allclose(record.vector_sum, unit(0) + 2 * unit(1))
    assert record.count == 3
    assert record.seen == Sighting("cam2", 101_000.0, 101.0)


def test_changes_since_a_cursor_return_only_later_changes(open_store):
    writer, reader = open_store(), open_store()
    first, second = writer.reserve_ids(2)
    writer.write([enrol(first, 0)])
    records, cursor = reader.changes(0)
    assert [r.identity_id for r in records] == [first]
    assert reader.changes(cursor) == ([], cursor)
    writer.write([enrol(second, 1), update(first, 0, 101.0)])
    records, later = reader.changes(cursor)
    assert sorted(r.identity_id for r in records) == [first, second] and later > cursor


def test_update_of_a_reserved_id_that_was_never_enrolled_is_dropped(open_store):
    store = open_store()
    [ident] = store.reserve_ids(1)
    assert store.write([update(ident, 0, 100.0)]) == 1
    assert live(store) == {}


def test_merge_folds_the_loser_into_the_survivor_and_redirects_later_updates(open_store):
    a, b = open_store(), open_store()
    survivor, loser = a.reserve_ids(1)[0], b.reserve_ids(1)[0]
    a.write([enrol(survivor, 0, wall_s=100.0)])
    b.write([enrol(loser, 0, wall_s=102.0, camera="cam2")])
    assert b.merge(loser, survivor)
    assert not a.merge(loser, survivor)  # the other worker saw the same pair: nothing more happens
    b.write([update(loser, 1, wall_s=103.0, camera="cam3")])  # b had not heard of the merge yet
    records, _ = a.changes(0)
    by_id = {r.identity_id: r for r in records}
    assert by_id[loser].state == MERGED and by_id[loser].merged_into == survivor
    np.testing.assert_allclose(by_id[survivor].vector_sum, 2 * unit(0) + unit(1))
    assert by_id[survivor].count == 3 and by_id[survivor].seen.camera == "cam3"


def test_an_enrolment_keeps_its_first_embedding_and_the_version_it_landed_at(open_store):
    a, b = open_store(), open_store()
    first, second = a.reserve_ids(2)
    a.write([StoreWrite(first, unit(0) + unit(1), 2, Sighting("cam1", 0.0, 100.0), True, unit(0))])
    _, cursor = b.changes(0)
    b.write([enrol(second, 2), update(first, 3, 101.0)])  # a later match of the first does not move either
    records, later = a.changes(0)
    by_id = {r.identity_id: r for r in records}
    np.testing.assert_array_equal(by_id[first].first, unit(0))
    assert by_id[second].first is None  # an enrolment that carried none (a store written before)
    assert by_id[first].enrolled_version <= cursor < by_id[second].enrolled_version <= later


def test_a_merge_into_an_identity_merged_meanwhile_lands_on_its_survivor(open_store):
    a, b = open_store(), open_store()
    x, y, z = a.reserve_ids(3)
    a.write([enrol(x, 0), enrol(y, 0), enrol(z, 0)])
    assert a.merge(y, x)  # one worker merged y into x ...
    assert b.merge(z, y)  # ... before another, which had not heard of it, merged z into y
    by_id = {r.identity_id: r for r in a.changes(0)[0]}
    assert by_id[z].merged_into == x and by_id[x].count == 3 and sorted(live(a)) == [x]
    assert not b.merge(x, z)  # z leads to x itself: nothing to do


def test_sweep_evicts_by_retention_then_least_recently_seen_beyond_capacity(open_store):
    store = open_store()
    ids = store.reserve_ids(4)
    store.write([enrol(ident, i, wall_s=100.0 + i) for i, ident in enumerate(ids)])
    assert store.sweep(now_s=200.0, retention_s=99.5, capacity=10) == 1  # ids[0] last seen at 100 < 100.5
    assert store.sweep(now_s=200.0, retention_s=99.5, capacity=2) == 1  # ids[1]: the least recently seen left
    assert sorted(live(store)) == ids[2:]
    records, _ = store.changes(0)
    assert {r.identity_id: r.state for r in records}[ids[0]] == EVICTED
    assert store.write([update(ids[0], 0, 300.0)]) == 1  # late news of an evicted identity is dropped
    assert store.reserve_ids(1)[0] > max(ids)


def test_numbered_writes_sent_again_are_applied_once_per_writer(open_store):
    """A push whose answer was lost is sent again as it was: the writes the store applied are skipped, the rest
    (and other writers' writes, numbered on their own) applied."""
    a, b = open_store(), open_store()
    [ident] = a.reserve_ids(1)
    assert a.write([enrol(ident, 0), update(ident, 1, 101.0)], "worker-a", 0) == 0  # writes 0 and 1
    assert a.write([enrol(ident, 0), update(ident, 1, 101.0), update(ident, 2, 102.0)], "worker-a", 0) == 0
    assert b.write([update(ident, 3, 103.0)], "worker-b", 0) == 0
    np.testing.assert_allclose(live(a)[ident].vector_sum, unit(0) + unit(1) + unit(2) + unit(3))
    assert live(a)[ident].count == 4
    a.write([update(ident, 4, 104.0)], "worker-a", 2)  # number 2 was applied: skipped (numbers are never reused)
    assert live(a)[ident].count == 4
    [never] = a.reserve_ids(1)
    assert a.write([update(never, 0, 100.0)], "worker-a", 3) == 1  # dropped (never enrolled) ...
    assert a.write([update(never, 0, 100.0)], "worker-a", 3) == 1  # ... and answered again when sent again
    assert a.write([update(ident, 5, 105.0)], "worker-a", 4) == 0  # a new push: its own drops only


def test_a_write_that_fails_midway_is_not_marked_applied(open_store):
    """Redis keeps what a script did before a runtime error: the number must be marked applied only after the
    change, or the write sent again would be skipped and lost (SQLite rolls the whole push back)."""
    store = open_store()
    [ident] = store.reserve_ids(1)
    store.write([enrol(ident, 0)], "worker-a", 0)
    wrong_size = StoreWrite(ident, np.ones(2 * D, np.float32), 1, Sighting("cam1", 0.0, 101.0), False)
    with pytest.raises(Exception):  # redis.ResponseError (the script's error) or ValueError (numpy's shapes)
        store.write([wrong_size], "worker-a", 1)
    assert store.write([update(ident, 1, 101.0)], "worker-a", 1) == 0
    assert live(store)[ident].count == 2


def test_a_writer_is_forgotten_a_while_after_its_last_push(open_store):
    store = open_store()
    [ident] = store.reserve_ids(1)
    store.write([enrol(ident, 0, wall_s=time.time())], "worker-a", 0)
    if isinstance(store, RedisStore):  # the key expires on its own
        assert 0 < store._redis.ttl(f"{store.prefix}:writer:worker-a") <= WRITER_TTL_S
        return
    store.sweep(time.time() + WRITER_TTL_S + 60, retention_s=10 * WRITER_TTL_S, capacity=10)
    store.write([update(ident, 1, time.time())], "worker-a", 0)  # number 0 again: a new writer's
    assert live(store)[ident].count == 2


def test_spaces_in_one_store_are_separate(open_store):
    a, b = open_store("embedder"), open_store("other")
    [ident] = a.reserve_ids(1)
    a.write([enrol(ident, 0)])
    assert live(b) == {}
    assert ident in live(a)


def test_identities_survive_closing_every_client(open_store):
    store = open_store()
    [ident] = store.reserve_ids(1)
    store.write([enrol(ident, 3)])
    store.close()
    np.testing.assert_allclose(live(open_store())[ident].vector_sum, unit(3))

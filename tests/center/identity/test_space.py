"""Workers sharing one identity space through a real store (SQLite file, real redis-server): the same object
gets the same id whichever worker sees it, concurrent enrolments merge, an absent store gives provisional ids
that are reconciled, a restart keeps every identity, topology pruning cuts comparisons."""

from __future__ import annotations

import time

import numpy as np
import pytest
from prometheus_client import REGISTRY

from vcascade.center.identity.metrics import STORE_OPS, IdentityTelemetry
from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import Sighting, StoreWrite
from vcascade.center.identity.sync import StoreSync
from vcascade.center.identity.topology import Topology

D = 16
THRESHOLD = 0.8


def obj(i: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """Unit embedding of object ``i`` (orthogonal to the others), with a little noise."""
    v = np.zeros(D, np.float32)
    v[i] = 1.0
    v += noise * np.random.default_rng(seed).standard_normal(D).astype(np.float32)
    return v / np.linalg.norm(v)


def seen(camera: str = "cam1", t_s: float = 0.0) -> Sighting:
    return Sighting(camera, 1000.0 * t_s, time.time())  # wall time: within the store's retention


class Worker:
    """One worker's space and sync (cycles are run by hand, so the test decides the interleaving)."""

    made = 0

    def __init__(self, name: str, store, id_block: int = 8, topology: Topology | None = None,
                 index: str = "exact") -> None:  # fmt: skip
        Worker.made += 1
        self.name = f"{name}-{Worker.made}"  # metrics start at 0 in every test
        self.space = IdentitySpace(THRESHOLD, 1000, index, topology)
        self.sync = StoreSync(self.space, store, IdentityTelemetry(self.name), 0.05, id_block, 86_400.0, 1000)
        self.sync.cycle()

    def see(self, *objects: int, camera: str = "cam1", t_s: float = 0.0):
        units = np.stack([obj(i, 0.05, seed=len(self.space) + k) for k, i in enumerate(objects)])
        outputs, stats = self.space.match(units, [seen(camera, t_s)] * len(objects))
        return outputs if len(objects) > 1 else outputs[0]

    def answer(self, vector: np.ndarray):
        """The output for one crop whose embedding is ``vector``."""
        (out,), _ = self.space.match(l2(vector)[None], [seen()])
        return out

    def metric(self, name: str, **labels) -> float:
        return REGISTRY.get_sample_value(name, {"worker": self.name, **labels}) or 0.0


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    opened = []

    def open_one():
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "identity.sqlite3", "embedder")
        else:
            store = RedisStore(request.getfixturevalue("redis_server").url, "embedder", timeout_s=1.0)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.mark.parametrize("index", ["exact", "ann"])
def test_an_object_enrolled_by_one_worker_is_matched_by_the_other_with_the_same_id(open_store, index):
    a, b = Worker("sp-a1", open_store(), index=index), Worker("sp-b1", open_store(), index=index)
    first = a.see(3)
    assert first.enrolled and first.identity_id >= 1 and not first.provisional
    a.sync.cycle()
    b.sync.cycle()
    again = b.see(3)
    assert not again.enrolled and again.identity_id == first.identity_id and again.similarity >= THRESHOLD
    other = b.see(4)
    assert other.enrolled and other.identity_id not in (first.identity_id, -1)


def test_ids_are_never_reused_across_workers(open_store):
    a, b = Worker("sp-a2", open_store(), id_block=2), Worker("sp-b2", open_store(), id_block=2)
    ids = []
    for i in range(5):
        ids += [a.see(i).identity_id, b.see(i + 5).identity_id]
        a.sync.cycle()  # new blocks as the old ones run out
        b.sync.cycle()
    assert len(set(ids)) == 10 and min(ids) >= 1


def test_two_workers_enrolling_one_object_at_once_converge_to_the_lower_id(open_store):
    a, b = Worker("sp-a3", open_store()), Worker("sp-b3", open_store())
    from_a, from_b = a.see(7), b.see(7)  # neither has heard of the other's enrolment
    assert from_a.enrolled and from_b.enrolled and from_a.identity_id != from_b.identity_id
    survivor, loser = sorted([from_a.identity_id, from_b.identity_id])
    for _ in range(2):  # the documented bound: two cycles of each worker
        a.sync.cycle()
        b.sync.cycle()
    answers = {w.name: w.see(7) for w in (a, b)}
    assert {out.identity_id for out in answers.values()} == {survivor}
    held_loser = a if from_a.identity_id == loser else b
    assert answers[held_loser.name].merged_from == (loser,)  # the worker that answered with it reports the merge
    assert sum(w.metric("vcascade_identity_merges_total", kind="duplicate") for w in (a, b)) == 1
    assert a.space.identities() == b.space.identities() == [survivor]


def test_identities_are_checked_only_when_their_enrolment_lands_so_old_ones_are_never_merged(open_store):
    writer = open_store()
    similar = [obj(7, 0.0), l2(obj(7, 0.0) + 0.3 * obj(8, 0.0))]  # cosine 0.96: one object by the threshold
    ids = writer.reserve_ids(2)
    writer.write([StoreWrite(i, v, 1, seen(), True) for i, v in zip(ids, similar)])  # enrolled long ago
    a = Worker("sp-a8", open_store())
    a.see(7)  # a matches (and so moves) one of them; neither landed since a's first pull: no merge
    for _ in range(2):
        a.sync.cycle()
    young = a.see(9)  # lands at a's next cycle, checked then: like nothing
    a.sync.cycle()
    b = Worker("sp-b8", open_store())  # loads all three at once (its first pull checks nothing)
    b.sync.cycle()
    assert sorted(a.space.identities()) == sorted(b.space.identities()) == sorted([*ids, young.identity_id])
    assert sum(w.metric("vcascade_identity_merges_total", kind="duplicate") for w in (a, b)) == 0


def drift(start: np.ndarray, towards: np.ndarray, angles_deg: list[float]) -> list[np.ndarray]:
    """Unit crops turning from ``start`` towards ``towards`` (orthogonal) by the given angles."""
    return [np.cos(np.radians(g)) * start + np.sin(np.radians(g)) * towards for g in angles_deg]


TURN_DEG = [20.0, 30.0, 40.0, 50.0, 55.0, 60.0, 65.0]
"""A turning object: each crop within the threshold of its identity's running centroid (checked below)."""


def test_a_concurrent_enrolment_merges_even_when_the_two_centroids_drifted_apart_before_the_push(open_store):
    """Two workers enrol the same crop before either hears of the other's; before either pushes, each matches
    later crops of the object into its own identity, turning it opposite ways, so the two centroids end below the
    threshold. The enrolment embeddings (the first crop, the same) still say one object."""
    a, b = Worker("sp-a10", open_store()), Worker("sp-b10", open_store())
    crop = obj(0, 0.0)
    from_a, from_b = a.answer(crop), b.answer(crop)
    assert from_a.enrolled and from_b.enrolled and from_a.identity_id != from_b.identity_id
    for worker, towards in ((a, obj(1, 0.0)), (b, obj(2, 0.0))):
        for later in drift(crop, towards, TURN_DEG):
            assert not worker.answer(later).enrolled  # matched into the worker's own identity
    centroid = {w.name: w.space._units[w.space._slot[out.identity_id]] for w, out in ((a, from_a), (b, from_b))}
    assert float(centroid[a.name] @ centroid[b.name]) < THRESHOLD  # drifted apart
    for _ in range(2):
        a.sync.cycle()
        b.sync.cycle()
    survivor = min(from_a.identity_id, from_b.identity_id)  # a's block comes first: a's landed first
    assert a.space.identities() == b.space.identities() == [survivor]
    assert {a.answer(crop).identity_id, b.answer(crop).identity_id} == {survivor}
    assert sum(w.metric("vcascade_identity_merges_total", kind="duplicate") for w in (a, b)) >= 1


def test_an_enrolment_on_a_copy_missing_another_workers_unpushed_matches_merges_when_that_worker_hears_of_it(
        open_store):  # fmt: skip
    """Worker a matches a turning object's crops into its identity X and has not pushed them; worker b, whose
    copy of X is the store's (the first crop), gets the last crop, which no longer matches that, and enrols Y.
    b pushes Y and pulls at once: the store's X does not show the duplicate. Then b's cycles go on (late ones
    included): the check that b could make is made. a, whose copy holds its own matches, hears of Y's enrolment
    at its next pull and merges Y into X, however much later that pull comes."""
    writer = open_store()
    crop = obj(0, 0.0)
    (x,) = writer.reserve_ids(1)
    writer.write([StoreWrite(x, crop, 1, seen(), True, crop)])
    a, b = Worker("sp-a11", open_store()), Worker("sp-b11", open_store())  # both load X
    turned = drift(crop, obj(1, 0.0), TURN_DEG)
    assert all(a.answer(later).identity_id == x for later in turned)
    last = turned[-1]
    assert float(last @ crop) < THRESHOLD
    y = b.answer(last)
    assert y.enrolled
    for _ in range(3):  # b pushes Y; its pulls show nothing to merge (a's matches are not in the store)
        b.sync.cycle()
    assert sorted(b.space.identities()) == sorted([x, y.identity_id])
    a.sync.cycle()  # a pushes its matches, pulls Y's enrolment, checks it against its own copy: merges
    assert a.metric("vcascade_identity_merges_total", kind="duplicate") == 1
    for worker in (a, b):
        worker.sync.cycle()  # each hears of the merge
    assert a.space.identities() == b.space.identities() == [x]
    assert b.metric("vcascade_identity_merges_total", kind="duplicate") == 0
    again = b.answer(last)
    assert again.identity_id == x and again.merged_from == (y.identity_id,)


def test_a_young_enrolment_made_on_a_stale_copy_merges_into_the_identity_it_missed(open_store):
    """Worker a enrols X for a crop because its copy of Y was out of date (other workers' matches had moved Y
    since a's last sync); once a hears of Y's new centroid, X lies at or above the threshold from Y and is
    merged into it (the kill -9 e2e test met this race)."""
    writer = open_store()
    v_old, v_new = obj(7, 0.0), l2(obj(7, 0.0) + 1.2 * obj(8, 0.0))  # cosine 0.64: below the threshold
    (y,) = writer.reserve_ids(1)
    writer.write([StoreWrite(y, v_old, 1, seen(), True)])
    a = Worker("sp-a9", open_store())  # loads Y as v_old
    writer.write([StoreWrite(y, 5 * v_new, 5, seen(), False)])  # matches elsewhere move Y towards v_new
    (x_out,), _ = a.space.match(v_new[None], [seen()])
    assert x_out.enrolled and x_out.identity_id not in (y, -1)  # a's copy of Y was stale
    for _ in range(2):  # push X, hear of Y's new centroid, merge
        a.sync.cycle()
    assert a.space.identities() == [y]
    (again,), _ = a.space.match(v_new[None], [seen()])
    assert again.identity_id == y and again.merged_from == (x_out.identity_id,)
    assert a.metric("vcascade_identity_merges_total", kind="duplicate") == 1


def l2(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_a_restarted_worker_keeps_every_identity(open_store):
    a = Worker("sp-a4", open_store())
    ids = [a.see(i).identity_id for i in range(4)]
    a.sync.close()  # a clean stop pushes what is left
    again = Worker("sp-a4", open_store())
    answers = [again.see(i) for i in range(4)]
    assert [out.identity_id for out in answers] == ids and not any(out.enrolled for out in answers)


def test_an_absent_store_gives_provisional_ids_that_are_reconciled_when_it_returns(redis_server):
    a = Worker("sp-a5", RedisStore(redis_server.url, "embedder", timeout_s=0.5), id_block=1)
    b = Worker("sp-b5", RedisStore(redis_server.url, "embedder", timeout_s=0.5))
    known = a.see(1).identity_id
    a.sync.cycle()
    redis_server.stop()
    assert not a.sync.cycle() and not a.space.in_sync
    assert sum(a.metric("vcascade_identity_store_errors_total", op=op) for op in STORE_OPS) >= 1
    still = a.see(1)
    assert still.identity_id == known and still.provisional  # the local copy keeps answering
    spare = a.see(3)  # the id reserved in the last cycle: a store id, answered out of sync
    assert spare.provisional and spare.enrolled and spare.identity_id >= 1
    new = a.see(2)  # no reserved id left: a provisional id
    assert new.provisional and new.enrolled and new.identity_id <= -2
    assert a.see(2).identity_id == new.identity_id
    redis_server.start()
    assert a.sync.cycle() and a.space.in_sync
    reconciled = a.see(2)
    assert reconciled.identity_id >= 1 and not reconciled.provisional
    assert reconciled.merged_from == (new.identity_id,)
    assert a.metric("vcascade_identity_merges_total", kind="reconciled") == 1
    b.sync.cycle()
    assert b.see(2).identity_id == reconciled.identity_id  # the other worker knows it by its store id


def test_a_worker_that_starts_while_the_store_is_down_serves_provisionally(redis_server):
    redis_server.stop()
    a = Worker("sp-a6", RedisStore(redis_server.url, "embedder", timeout_s=0.3))
    out = a.see(5)
    assert out.provisional and out.identity_id <= -2
    redis_server.start()
    assert a.sync.cycle()
    assert a.see(5).merged_from == (out.identity_id,)


def test_topology_compares_only_with_identities_that_could_have_come(open_store):
    topo = Topology([("gate", "street", 5.0, 30.0)])
    a = Worker("sp-a7", open_store(), topology=topo)
    a.see(0, camera="gate", t_s=0.0)
    a.see(1, camera="park", t_s=0.0)  # park is linked to nothing: never pruned
    a.see(2, camera="street", t_s=100.0)
    a.see(3, camera="gate", t_s=100.0)
    outputs, stats = a.space.match(np.stack([obj(3, 0.05, 9)]), [seen("street", 110.0)])
    assert not outputs[0].enrolled  # gate at 100 s -> street at 110 s: in the window
    assert stats.comparisons == 3  # 1 (park: unpruned), 2 (street itself), 3 (gate, in the window); not 0
    outputs, stats = a.space.match(np.stack([obj(0, 0.05, 9)]), [seen("street", 200.0)])
    assert outputs[0].enrolled  # 200 s after the gate: too late to be the same object
    assert stats.comparisons == 3  # 1, 2 and 3 (now last seen on the street); not 0


NEAR_0 = l2(obj(0, 0.0) + 1.33 * obj(1, 0.0))
"""An object whose embedding has cosine 0.60 with object 0's: below the threshold, a different identity."""
BETWEEN = l2(0.6 * obj(0, 0.0) + 0.4 * NEAR_0)
"""A crop at cosine 0.93 to object 0 and 0.85 to :data:`NEAR_0`: both at or above the threshold."""


@pytest.mark.parametrize("index", ["exact", "ann"])
def test_a_crop_close_to_two_identities_names_the_runner_up_and_a_clear_one_names_none(open_store, index):
    a = Worker("sp-ru1", open_store(), index=index)
    close_to_0, close_to_1 = a.answer(obj(0, 0.0)), a.answer(NEAR_0)
    assert close_to_0.enrolled and close_to_1.enrolled
    ambiguous = a.answer(BETWEEN)
    assert not ambiguous.enrolled and ambiguous.identity_id == close_to_0.identity_id
    assert ambiguous.runner_up_id == close_to_1.identity_id
    assert THRESHOLD <= ambiguous.runner_up_similarity < ambiguous.similarity
    clear = a.answer(obj(0, 0.0))
    assert clear.identity_id == close_to_0.identity_id and clear.runner_up_id == -1
    assert clear.runner_up_similarity is None
    new = a.answer(obj(5, 0.0))
    assert new.enrolled and new.runner_up_id == -1 and new.runner_up_similarity is None


def test_the_runner_up_is_found_among_the_topology_candidates_too(open_store):
    a = Worker("sp-ru2", open_store(), topology=Topology([("gate", "street", 5.0, 30.0)]))
    (first, second), _ = a.space.match(np.stack([obj(0, 0.0), NEAR_0]), [seen("gate", 0.0)] * 2)
    (out,), stats = a.space.match(BETWEEN[None], [seen("street", 10.0)])
    assert (out.identity_id, out.runner_up_id) == (first.identity_id, second.identity_id)
    assert first.enrolled and second.enrolled and stats.comparisons == 2


class MergeFailsOnce(SqliteStore):
    """The real SQLite store whose first ``merge`` call fails as a store that went away between the pull and the
    merge would (the only way to place a failure exactly there)."""

    failed = False

    def merge(self, loser: int, survivor: int) -> bool:
        if not self.failed:
            self.failed = True
            raise ConnectionError("store went away")
        return super().merge(loser, survivor)


def test_a_duplicate_whose_merge_the_store_did_not_take_is_merged_in_the_next_cycle(tmp_path):
    """The pull that revealed the duplicate has moved the cursor on, so the merge is kept until the store takes
    it; before, it was lost with the failed cycle and both identities stayed."""
    store = MergeFailsOnce(tmp_path / "identity.sqlite3", "embedder")
    a, b = Worker("sp-a14", store), Worker("sp-b14", store)
    from_a, from_b = a.see(7), b.see(7)
    assert a.sync.cycle()  # a's enrolment lands first
    assert not b.sync.cycle() and store.failed  # b's lands, b finds the duplicate, the merge fails
    for _ in range(2):
        assert b.sync.cycle() and a.sync.cycle()  # the merge is retried, then both pull it
    survivor = min(from_a.identity_id, from_b.identity_id)
    assert a.space.identities() == b.space.identities() == [survivor]
    assert b.metric("vcascade_identity_merges_total", kind="duplicate") == 1


def test_a_provisional_id_is_reported_even_when_the_store_id_that_replaced_it_is_merged(redis_server):
    """A worker answers a provisional id while the store is away; when it returns, the id is replaced by a store
    id, which duplicates another worker's enrolment of the object and is merged away. The next answer names the
    survivor and lists both ids it replaced, so a reader of the results can follow the provisional one."""
    a = Worker("sp-a15", RedisStore(redis_server.url, "embedder", timeout_s=0.5), id_block=1)
    b = Worker("sp-b15", RedisStore(redis_server.url, "embedder", timeout_s=0.5))
    a.see(1)  # uses a's one reserved id
    redis_server.stop()
    assert not a.sync.cycle()
    provisional = a.see(7)
    assert provisional.identity_id <= -2
    redis_server.start()
    established = b.see(7)
    assert b.sync.cycle()  # b's enrolment of the object lands first
    for _ in range(2):
        assert a.sync.cycle()  # replaces the provisional id, pushes it, finds and merges the duplicate
    answer = a.see(7)
    assert answer.identity_id == established.identity_id
    assert provisional.identity_id in answer.merged_from and len(answer.merged_from) == 2


def away_once(store_class: type) -> type:
    """The real store class whose next ``write`` once ``armed`` raises before applying anything, as a store that
    is away would."""

    class AwayOnce(store_class):
        armed = False

        def write(self, writes, *numbering):
            if self.armed:
                self.armed = False
                raise ConnectionError("store away: nothing applied")
            return super().write(writes, *numbering)

    return AwayOnce


def answer_lost_once(store_class: type) -> type:
    """The real store class whose next ``write`` once ``armed`` applies the push and then raises, as a store whose
    answer was lost on the way back would (a timeout after the apply: the only way to place a failure exactly
    there)."""

    class AnswerLostOnce(store_class):
        armed = False

        def write(self, writes, *numbering):
            dropped = super().write(writes, *numbering)
            if self.armed:
                self.armed = False
                raise TimeoutError("the push was applied, its answer lost")
            return dropped

    return AnswerLostOnce


def _faulty(backend: str, wrap, tmp_path, request):
    """A plain store and one of class ``wrap(backend class)`` on the same real backend."""
    if backend == "sqlite":
        path = tmp_path / "identity.sqlite3"
        return SqliteStore(path, "embedder"), wrap(SqliteStore)(path, "embedder")
    url = request.getfixturevalue("redis_server").url
    return RedisStore(url, "embedder"), wrap(RedisStore)(url, "embedder")


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_push_the_store_did_not_take_is_sent_again_before_the_news_after_it(backend, tmp_path, request):
    """The enrolment in the failed push must land before the matches made since (pushed in the next push: an
    update of an identity not yet enrolled would be dropped), and must not be forgotten."""
    store, away = _faulty(backend, away_once, tmp_path, request)
    a = Worker("sp-a17", away)
    away.armed = True
    ident = a.see(3).identity_id
    for _ in range(4):
        a.see(3)
    assert not a.sync.cycle()  # the enrolment (count 5) not taken
    for _ in range(2):
        a.see(3)
    assert a.sync.cycle()
    [record] = [r for r in store.changes(0)[0] if r.identity_id == ident]
    assert record.count == 5 + 2
    assert a.metric("vcascade_identity_dropped_updates_total") == 0
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_updates_dropped_by_a_push_whose_answer_was_lost_are_counted_once(backend, tmp_path, request):
    store, lossy = _faulty(backend, answer_lost_once, tmp_path, request)
    a = Worker("sp-a18", lossy)
    a.see(2)
    assert a.sync.cycle()
    assert store.sweep(time.time() + 60.0, retention_s=1.0, capacity=1000) == 1  # evicted in the store
    a.see(2)  # matched in the worker's copy, which has not pulled the eviction yet
    lossy.armed = True
    assert not a.sync.cycle()  # the update dropped, the answer lost
    assert a.sync.cycle()  # sent again: skipped, and its drop answered again
    assert a.metric("vcascade_identity_dropped_updates_total") == 1
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_push_whose_answer_was_lost_is_sent_again_and_applied_once(backend, tmp_path, request):
    """Before, the failed push went back into the worker's news and was pushed again with what came after: the
    store added its sums twice (count 13 here instead of 8)."""
    store, lossy = _faulty(backend, answer_lost_once, tmp_path, request)
    a = Worker("sp-a16", lossy)
    ident = a.see(3).identity_id
    assert a.sync.cycle()  # the enrolment
    lossy.armed = True
    for _ in range(5):
        assert a.see(3).identity_id == ident
    assert not a.sync.cycle()  # five matches applied, the answer lost
    assert a.metric("vcascade_identity_store_errors_total", op="write") == 1
    for _ in range(2):
        a.see(3)
    assert a.sync.cycle()  # the five again (skipped), then the two
    [record] = [r for r in store.changes(0)[0] if r.identity_id == ident]
    assert record.count == 1 + 5 + 2
    assert a.space._counts[a.space._slot[ident]] == 8  # the worker's copy agrees
    store.close()

"""The dispatch policy with recognizers (pure, explicit time): ROIs go only to workers of their recognizer."""

from __future__ import annotations

import random

import pytest

from vcascade.broker.dispatch import Dispatcher, InFlight, Pending, RecognizerChanged
from vcascade.broker.queues import RoiQueues


def roi(roi_id: str, recognizer: str = "", camera: str = "cam", t: float = 0.0, ttl_ms: float = 0.0,
        deferrable: bool = False) -> Pending:  # fmt: skip
    return Pending(roi_id=roi_id, camera=camera, received_s=t, ttl_ms=ttl_ms, recognizer=recognizer,
                   deferrable=deferrable)  # fmt: skip


def dispatch_all(d: Dispatcher, now: float = 0.0) -> list[InFlight]:
    out = []
    while True:
        flight, stale = d.next_dispatch(now)
        assert stale == []
        if flight is None:
            return out
        out.append(flight)


def routed(flights: list[InFlight]) -> list[tuple[str, str]]:
    return [(f.pending.roi_id, f.worker) for f in flights]


def test_rois_go_only_to_workers_of_their_recognizer():
    d = Dispatcher(queue_max=100)
    d.worker_ready("text-1", credits=10, now_s=0.0, recognizer="text")
    d.worker_ready("embed-1", credits=10, now_s=0.0, recognizer="embed")
    for i in range(3):
        d.enqueue(roi(f"t{i}", "text"))
        d.enqueue(roi(f"e{i}", "embed"))
    got = routed(dispatch_all(d))
    assert sorted(got) == sorted([(f"t{i}", "text-1") for i in range(3)] + [(f"e{i}", "embed-1") for i in range(3)])


def test_busy_recognizer_does_not_block_another_recognizer():
    """Head-of-line blocking: ROIs for a saturated recognizer queued first must not hold back the others."""
    d = Dispatcher(queue_max=1000)
    d.worker_ready("slow", credits=1, now_s=0.0, recognizer="text")
    d.worker_ready("fast", credits=100, now_s=0.0, recognizer="embed")
    for i in range(50):  # the text ROIs arrive first, on the same camera
        d.enqueue(roi(f"t{i}", "text", camera="cam-1"))
    for i in range(5):
        d.enqueue(roi(f"e{i}", "embed", camera="cam-1"))
    got = routed(dispatch_all(d))
    assert got[0] == ("t0", "slow")
    assert [r for r, w in got[1:]] == [f"e{i}" for i in range(5)] and {w for _, w in got[1:]} == {"fast"}
    assert d.queued == 49  # the text backlog waits for its own worker
    d.complete("t0", "slow")
    assert routed(dispatch_all(d)) == [("t1", "slow")]


def test_recognizer_without_workers_does_not_block_the_others():
    d = Dispatcher(queue_max=1000)
    d.worker_ready("embed-1", credits=10, now_s=0.0, recognizer="embed")
    for i in range(20):
        d.enqueue(roi(f"x{i}", "text"))  # nobody runs text
    d.enqueue(roi("e0", "embed"))
    assert routed(dispatch_all(d)) == [("e0", "embed-1")]
    assert not d.has_worker("text") and d.has_worker("embed") and d.has_worker("")
    assert d.queued_by_recognizer() == {"text": 20}


def test_round_robin_across_cameras_within_a_recognizer():
    d = Dispatcher(queue_max=1000)
    for i in range(100):
        d.enqueue(roi(f"A{i}", "embed", camera="A"))
    for i in range(2):
        d.enqueue(roi(f"B{i}", "embed", camera="B"))
        d.enqueue(roi(f"T{i}", "text", camera="B"))
    d.worker_ready("w", credits=6, now_s=0.0, recognizer="embed")
    assert [r for r, _ in routed(dispatch_all(d))] == ["A0", "B0", "A1", "B1", "A2", "A3"]


def test_least_loaded_then_lru_within_a_recognizer():
    d = Dispatcher(queue_max=100)
    d.worker_ready("e1", credits=4, now_s=0.0, recognizer="embed")
    d.worker_ready("t1", credits=4, now_s=0.0, recognizer="text")  # idle, but another recognizer
    d.worker_ready("e2", credits=4, now_s=0.0, recognizer="embed")
    for i in range(4):
        d.enqueue(roi(f"e{i}", "embed"))
    assert [w for _, w in routed(dispatch_all(d))] == ["e1", "e2", "e1", "e2"]


def test_rois_for_any_recognizer_go_to_any_worker_and_unnamed_workers_take_only_those():
    d = Dispatcher(queue_max=100)
    d.worker_ready("legacy", credits=10, now_s=0.0)  # announced no recognizer
    d.enqueue(roi("named", "text"))
    d.enqueue(roi("any-1"))
    assert routed(dispatch_all(d)) == [("any-1", "legacy")]
    d.worker_ready("text-1", credits=10, now_s=0.0, recognizer="text")
    d.enqueue(roi("any-2"))
    # "any-2" may go to either: both hold one ROI, the legacy worker was used less recently
    assert dict(routed(dispatch_all(d))) == {"named": "text-1", "any-2": "legacy"}


def test_a_worker_keeps_its_first_recognizer():
    d = Dispatcher(queue_max=100)
    assert d.worker_ready("w", credits=2, now_s=0.0, recognizer="embed") is True
    with pytest.raises(RecognizerChanged):
        d.worker_ready("w", credits=50, now_s=1.0, recognizer="text")
    assert d.recognizer("w") == "embed" and d.credits("w") == 2  # nothing updated
    assert d.worker_ready("w", credits=3, now_s=2.0, recognizer="embed") is False
    assert d.recognizer("nobody") is None


def test_redispatch_after_worker_loss_stays_within_the_recognizer():
    d = Dispatcher(queue_max=100, max_attempts=3)
    d.worker_ready("e1", credits=2, now_s=0.0, recognizer="embed")
    d.worker_ready("t1", credits=10, now_s=0.0, recognizer="text")
    d.enqueue(roi("e0", "embed"))
    d.enqueue(roi("e1", "embed"))
    d.enqueue(roi("e2", "embed"))
    assert {w for _, w in routed(dispatch_all(d))} == {"e1"}
    given_up, dropped = d.requeue(d.worker_gone("e1"))
    assert given_up == [] and dropped == []
    assert dispatch_all(d) == []  # the idle text worker must not take embed ROIs
    d.worker_ready("e2", credits=10, now_s=1.0, recognizer="embed")
    assert [r for r, _ in routed(dispatch_all(d, 1.0))] == ["e0", "e1", "e2"]  # re-queued ones first, in order
    assert d.was_taken_from("e0", "e1") and not d.was_taken_from("e0", "t1")


def test_no_worker_reason_for_rois_that_waited_for_an_absent_recognizer():
    d = Dispatcher(queue_max=2)
    d.worker_ready("e1", credits=1, now_s=0.0, recognizer="embed")
    text, embed, anything = roi("t", "text", ttl_ms=10), roi("e", "embed", ttl_ms=10), roi("a", ttl_ms=10)
    assert d.give_up_reason(text, "stale") == "no_worker"
    assert d.give_up_reason(text, "queue_full") == "no_worker"
    assert d.give_up_reason(text, "shutdown") == "shutdown"
    assert d.give_up_reason(embed, "stale") == "stale"  # its worker exists (only busy)
    assert d.give_up_reason(anything, "stale") == "stale"
    d.enqueue(text)
    d.enqueue(roi("t2", "text"))
    (overflow,) = d.enqueue(roi("t3", "text"))
    assert overflow.roi_id == "t" and d.give_up_reason(overflow, "queue_full") == "no_worker"
    assert [p.roi_id for p in d.stale(now_s=1.0)] == []  # t2, t3 have no deadline: they wait for the bound


def test_rois_without_a_deadline_for_an_absent_recognizer_are_stranded_after_no_worker_wait_s():
    """Issue 18: without ``ttl_ms`` they waited until the edge gave up on them as ``timeout``."""
    d = Dispatcher(queue_max=100, no_worker_wait_s=5.0)
    d.worker_ready("e1", credits=0, now_s=0.0, recognizer="embed")  # busy: its ROIs wait, they are not stranded
    d.enqueue(roi("t0", "text", t=0.0))
    d.enqueue(roi("e0", "embed", t=0.0))
    d.enqueue(roi("t1", "text", t=2.0))
    assert d.stranded(now_s=5.0) == []
    assert [p.roi_id for p in d.stranded(now_s=5.5)] == ["t0"]
    assert [p.roi_id for p in d.stranded(now_s=7.5)] == ["t1"]
    assert d.queued == 1 and d.give_up_reason(roi("t2", "text"), "no_worker") == "no_worker"
    d.enqueue(roi("t3", "text", t=8.0))
    d.worker_ready("text-1", credits=0, now_s=8.0, recognizer="text")  # a worker of it registers: it waits on
    assert d.stranded(now_s=100.0) == []


def test_rois_for_any_worker_are_stranded_only_while_no_worker_at_all_is_registered():
    d = Dispatcher(queue_max=100, no_worker_wait_s=1.0)
    d.enqueue(roi("a0", t=0.0))
    assert [p.roi_id for p in d.stranded(now_s=2.0)] == ["a0"]
    d.worker_ready("w1", credits=0, now_s=2.0, recognizer="embed")
    d.enqueue(roi("a1", t=2.0))
    assert d.stranded(now_s=10.0) == []


def test_stale_heads_of_a_served_recognizer_are_set_aside():
    d = Dispatcher(queue_max=100)
    d.enqueue(roi("old", "embed", t=0.0, ttl_ms=100))
    d.enqueue(roi("waits", "text", t=0.0, ttl_ms=100))  # no worker: not touched by dispatching
    d.enqueue(roi("young", "embed", t=0.95))
    d.worker_ready("e", credits=5, now_s=1.0, recognizer="embed")
    flight, stale = d.next_dispatch(now_s=1.0)
    assert [p.roi_id for p in stale] == ["old"] and flight.pending.roi_id == "young"
    assert [p.roi_id for p in d.stale(now_s=1.0)] == ["waits"]


def test_queue_full_drops_from_the_recognizer_that_piles_up():
    d = Dispatcher(queue_max=5)
    d.worker_ready("e", credits=1, now_s=0.0, recognizer="embed")
    d.enqueue(roi("e0", "embed"))
    d.enqueue(roi("e1", "embed"))
    dropped = [p.roi_id for i in range(6) for p in d.enqueue(roi(f"t{i}", "text"))]
    assert dropped == ["t0", "t1", "t2"] and d.queued_by_recognizer() == {"embed": 2, "text": 3}


def test_queues_put_back_keeps_each_queue_oldest_first():
    q = RoiQueues()
    for seq, (rid, rec) in enumerate([("a", "x"), ("b", "y"), ("c", "x"), ("d", "x")], start=1):
        q.append(seq, roi(rid, rec))
    taken = q.pop_head(("x", "cam"))
    assert taken[1].roi_id == "a" and len(q) == 3 and "a" not in q
    q.put_back([taken])
    assert [item.roi_id for item in q.drain()] == ["a", "b", "c", "d"] and not q


@pytest.mark.parametrize("seed", range(20))
def test_randomized_routing_invariants(seed):
    """Random arrivals (first sightings and refreshes), answers, losses: every ROI ends exactly once and only on
    workers of its recognizer."""
    rng = random.Random(seed)
    recognizers = ["a", "b", ""]
    d = Dispatcher(queue_max=rng.randint(3, 30), max_attempts=2)
    workers: dict[str, str] = {}
    ended: dict[str, str] = {}
    recognizer_of: dict[str, str] = {}
    now = 0.0
    for step in range(600):
        now += 0.01
        op = rng.random()
        if op < 0.4:
            rid = f"r{step}"
            recognizer_of[rid] = rng.choice(recognizers)
            for p in d.enqueue(roi(rid, recognizer_of[rid], rng.choice("XY"), now, deferrable=rng.random() < 0.5)):
                ended[p.roi_id] = "queue_full"
        elif op < 0.5 and len(workers) < 4:
            name = f"w{step}"
            workers[name] = rng.choice(["a", "b"])
            d.worker_ready(name, rng.randint(1, 3), now, workers[name])
        elif op < 0.55 and workers:
            name = rng.choice(sorted(workers))
            given_up, dropped = d.requeue(d.worker_gone(name))
            del workers[name]
            ended.update({p.roi_id: "worker_lost" for p in given_up} | {p.roi_id: "queue_full" for p in dropped})
        else:
            flight, stale = d.next_dispatch(now)
            assert stale == []
            if flight is not None:
                rec = recognizer_of[flight.pending.roi_id]
                assert rec in ("", workers[flight.worker]), (flight, workers)
                if rng.random() < 0.8:
                    assert d.complete(flight.pending.roi_id, flight.worker) is flight
                    ended[flight.pending.roi_id] = "result"
    live = d.queued + d.in_flight
    assert len(ended) + live == len(recognizer_of)
    assert not set(ended) & {p.roi_id for p in d.drain()}

"""The broker's bounds in the pure dispatch policy (no sockets, explicit time): queued bytes in all, per recognizer
and per edge; ROIs held past the answer deadline; registration at ``max_workers`` with fakes in every slot."""

from __future__ import annotations

import random

import pytest

from vcascade.broker.dispatch import ByteBounds, Dispatcher, InFlight, Pending, WorkerLimit
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES

MIB = 1024 * 1024


def roi(roi_id: str, size: int = 100, camera: str = "cam", recognizer: str = "", edge: bytes = b"e1",
        t: float = 0.0) -> Pending:  # fmt: skip
    return Pending(roi_id, camera, t, recognizer=recognizer, size_bytes=size, edge=edge)


def ids(items: list[Pending]) -> list[str]:
    return [item.roi_id for item in items]


def dispatch_all(d: Dispatcher, now: float = 0.0) -> list[InFlight]:
    out = []
    while (flight := d.next_dispatch(now)[0]) is not None:
        out.append(flight)
    return out


# ---------------------------------------------------------------- queued bytes


def test_the_recognizers_heaviest_queue_pays_for_its_bytes_and_other_recognizers_keep_theirs():
    d = Dispatcher(queue_max=1000, byte_bounds=ByteBounds(total=10_000, recognizer=300, edge=10_000))
    assert d.enqueue(roi("embed0", 250, recognizer="embed")) == []
    assert d.enqueue(roi("A0", 100, "A", "text")) == []
    assert d.enqueue(roi("A1", 100, "A", "text")) == []
    assert d.enqueue(roi("B0", 80, "B", "text")) == []  # text: 280 bytes
    assert ids(d.enqueue(roi("B1", 80, "B", "text"))) == ["A0"]  # 360 > 300: A (200 bytes) is the heaviest queue
    assert ids(d.enqueue(roi("B2", 80, "B", "text"))) == ["B0"]  # 340: B (240) is heaviest now
    assert d.queued_bytes == 250 + 100 + 160 and "embed0" in d


def test_an_edge_over_its_bytes_loses_its_own_oldest_roi_whichever_queue_holds_it():
    d = Dispatcher(queue_max=1000, byte_bounds=ByteBounds(total=10_000, recognizer=10_000, edge=300))
    d.enqueue(roi("x0", 100, "X", edge=b"e1"))
    d.enqueue(roi("y0", 100, "Y", edge=b"e1"))
    d.enqueue(roi("z0", 250, "Z", edge=b"e2"))
    d.enqueue(roi("y1", 100, "Y", edge=b"e1"))  # e1: 300, at the bound
    assert ids(d.enqueue(roi("x1", 50, "X", edge=b"e1"))) == ["x0"]  # e1's oldest, not the heavier queue Y
    assert ids(d.enqueue(roi("y2", 100, "Y", edge=b"e1"))) == ["y0"]
    assert "z0" in d and d.queued_bytes == 250 + 100 + 50 + 100


def test_above_the_total_bytes_the_heaviest_queue_pays_ties_to_the_oldest_head():
    d = Dispatcher(queue_max=1000, byte_bounds=ByteBounds(total=400, recognizer=1000, edge=1000))
    d.enqueue(roi("a0", 100, "A", edge=b"e1"))
    d.enqueue(roi("b0", 100, "B", edge=b"e2"))
    d.enqueue(roi("a1", 100, "A", edge=b"e1"))
    d.enqueue(roi("b1", 100, "B", edge=b"e2"))
    assert ids(d.enqueue(roi("c0", 50, "C", edge=b"e3"))) == ["a0"]  # A and B both 200: A's head is older
    assert ids(d.enqueue(roi("c1", 200, "C", edge=b"e3"))) == ["c0", "b0"]  # C (250) pays, then B (200) over A (100)
    assert d.queued_bytes == 400


def test_an_roi_heavier_than_a_bound_alone_is_dropped_at_once_and_displaces_nothing():
    d = Dispatcher(queue_max=1000, byte_bounds=ByteBounds(total=1000, recognizer=1000, edge=300))
    d.enqueue(roi("small", 200))
    big = roi("big", 301)
    assert d.enqueue(big) == [big]
    assert "big" not in d and "small" in d and d.queued_bytes == 200


def test_forty_rois_of_16_mib_for_a_recognizer_nobody_serves_stay_within_the_default_bounds():
    """Issue 17, case 3: the broker's memory grew by every ROI; now the recognizer's queue keeps what fits."""
    d = Dispatcher(queue_max=10_000)
    d.worker_ready("w", credits=4, now_s=0.0, recognizer="embed")
    limit = ByteBounds().recognizer
    dropped = []
    for i in range(40):
        dropped += d.enqueue(roi(f"r{i}", MAX_MESSAGE_BYTES + 200, recognizer="text", t=float(i)))
        assert d.queued_bytes <= limit
    kept = limit // (MAX_MESSAGE_BYTES + 200)
    assert d.queued == kept and ids(dropped) == [f"r{i}" for i in range(40 - kept)]  # oldest first
    assert {d.give_up_reason(item, "queue_full") for item in dropped} == {"no_worker"}
    assert dispatch_all(d) == []  # nothing for the embed worker


def test_re_queued_rois_count_against_the_byte_bounds():
    d = Dispatcher(queue_max=1000, byte_bounds=ByteBounds(total=10_000, recognizer=10_000, edge=300))
    d.worker_ready("w", credits=2, now_s=0.0)
    d.enqueue(roi("r0", 150, t=0.0))
    d.enqueue(roi("r1", 150, t=0.0))
    assert len(dispatch_all(d)) == 2 and d.queued_bytes == 0  # in flight: not queued bytes
    d.enqueue(roi("r2", 150, t=1.0))
    d.enqueue(roi("r3", 150, t=1.0))
    given_up, dropped = d.requeue(d.worker_gone("w"))
    assert given_up == [] and ids(dropped) == ["r0", "r1"]  # back at the head, the edge's oldest: they pay
    assert d.queued_bytes == 300


def test_queued_bytes_always_equal_the_bytes_of_the_rois_queued():
    rng = random.Random(17)
    d = Dispatcher(queue_max=50, byte_bounds=ByteBounds(total=5000, recognizer=3000, edge=2500))
    queued: dict[str, Pending] = {}
    for step in range(3000):
        now = step * 0.01
        op = rng.random()
        if op < 0.6:
            item = roi(f"r{step}", rng.randint(1, 900), rng.choice("ABC"), rng.choice(["", "text", "embed"]),
                       rng.choice([b"e1", b"e2"]), now)  # fmt: skip
            item.ttl_ms = rng.choice([0.0, 200.0])
            queued[item.roi_id] = item
            for gone in d.enqueue(item):
                queued.pop(gone.roi_id)
        elif op < 0.8:
            d.worker_ready("w", credits=3, now_s=now)
            flight, stale = d.next_dispatch(now)
            for gone in stale + ([flight.pending] if flight else []):
                queued.pop(gone.roi_id)
        elif op < 0.9:
            for gone in d.stale(now):
                queued.pop(gone.roi_id)
        else:
            d.drain_in_flight()  # answered
        assert d.queued_bytes == sum(item.size_bytes for item in queued.values())
        assert d.queued == len(queued) <= 50 and d.queued_bytes <= 5000
    for gone in d.drain():
        queued.pop(gone.roi_id)
    assert queued == {} and d.queued_bytes == 0


# ---------------------------------------------------------------- answer deadline


def test_rois_held_past_the_answer_deadline_are_taken_back_with_the_workers_credits():
    d = Dispatcher(queue_max=100, answer_timeout_s=10.0)
    d.worker_ready("fake", credits=2, now_s=0.0)
    d.enqueue(roi("r0"))
    d.enqueue(roi("r1"))
    assert len(dispatch_all(d, now=0.0)) == 2
    assert d.overdue(10.0) == []  # exactly at the deadline: still in time
    taken = d.overdue(10.5)
    assert [(worker, ids([f.pending for f in flights])) for worker, flights in taken] == [("fake", ["r0", "r1"])]
    assert d.in_flight == 0 and d.load("fake") == 0
    given_up, dropped = d.requeue(taken[0][1])
    assert given_up == dropped == [] and d.queued == 2
    d.worker_ready("fake", credits=2, now_s=11.0)  # a fresh Ready does not give the credits back
    assert dispatch_all(d, now=11.0) == []
    d.worker_ready("real", credits=2, now_s=11.0)
    assert [(f.worker, f.pending.roi_id) for f in dispatch_all(d, now=11.0)] == [("real", "r0"), ("real", "r1")]


def test_a_late_answer_gives_the_worker_its_credits_back_but_completes_nothing():
    d = Dispatcher(queue_max=100, answer_timeout_s=1.0)
    d.worker_ready("slow", credits=1, now_s=0.0)
    d.enqueue(roi("r0"))
    dispatch_all(d, now=0.0)
    d.requeue(d.overdue(2.0)[0][1])
    assert dispatch_all(d, now=2.0) == []  # no credit left
    assert d.complete("r0", "slow") is None and d.was_taken_from("r0", "slow")  # late: the caller counts it
    assert [f.pending.roi_id for f in dispatch_all(d, now=2.0)] == ["r0"]  # the credit is back: second attempt


def test_the_overdue_sweep_takes_only_the_rois_past_their_deadline_in_dispatch_order():
    d = Dispatcher(queue_max=100, answer_timeout_s=10.0)
    d.worker_ready("a", credits=1, now_s=0.0)
    d.worker_ready("b", credits=1, now_s=0.0)
    d.enqueue(roi("r0"))
    dispatch_all(d, now=0.0)
    d.enqueue(roi("r1"))
    dispatch_all(d, now=5.0)
    assert [(w, ids([f.pending for f in fs])) for w, fs in d.overdue(12.0)] == [("a", ["r0"])]
    assert d.in_flight == 1 and d.load("b") == 1


# ---------------------------------------------------------------- registration at max_workers


def test_a_new_worker_takes_the_place_of_the_least_useful_one():
    d = Dispatcher(queue_max=100, max_workers=3, answer_timeout_s=1.0)
    d.worker_ready("useful", credits=1, now_s=0.0)
    d.enqueue(roi("u0"))
    dispatch_all(d, now=0.0)
    assert d.complete("u0", "useful") is not None  # it answered
    d.worker_ready("owes", credits=1, now_s=0.0)
    d.enqueue(roi("o0"))
    assert [f.worker for f in dispatch_all(d, now=0.0)] == ["owes"]  # least recently used
    d.worker_ready("quiet", credits=1, now_s=0.5)  # never answered, never held an ROI
    d.requeue(d.overdue(2.0)[0][1])  # "owes" held o0 past the deadline
    assert d.make_room("useful") == []  # registered: nothing to do
    assert d.make_room("new") == [("owes", [])]  # owing answers ranks below never answering
    assert d.worker_ready("new", credits=1, now_s=2.0) and d.workers == 3
    assert [(f.worker, f.pending.roi_id) for f in dispatch_all(d, now=2.0)] == [("quiet", "o0")]
    [(evicted, flights)] = d.make_room("newer")  # never answered: the least recently heard goes
    assert evicted == "quiet" and [f.pending.roi_id for f in flights] == ["o0"]  # for the caller to re-queue
    assert d.worker_ready("newer", credits=1, now_s=3.0) and d.workers == 3


def test_workers_that_answered_and_owe_nothing_are_never_evicted():
    d = Dispatcher(queue_max=100, max_workers=2)
    for worker in ("a", "b"):
        d.worker_ready(worker, credits=1, now_s=0.0)
        d.enqueue(roi(f"{worker}0"))
        [flight] = dispatch_all(d)
        d.complete(flight.pending.roi_id, worker)
    assert d.make_room("c") == []
    with pytest.raises(WorkerLimit):
        d.worker_ready("c", credits=1, now_s=1.0)


def test_a_restarted_worker_registers_at_once_beside_1024_fakes_and_gets_their_rois_after_the_deadline():
    """Issue 17, case 4: fakes announce credits and never answer; they held every slot and every ROI."""
    d = Dispatcher(queue_max=10_000, max_workers=1024, answer_timeout_s=20.0, worker_timeout_s=60.0)
    for i in range(1024):
        d.worker_ready(f"fake{i}", credits=1, now_s=0.0, recognizer="embed")
    for i in range(1024):
        d.enqueue(roi(f"r{i}", recognizer="embed"))
    assert len(dispatch_all(d, now=1.0)) == 1024 and d.queued == 0
    [(evicted, flights)] = d.make_room("real")
    assert evicted == "fake0" and len(flights) == 1
    d.requeue(flights)
    assert d.worker_ready("real", credits=4, now_s=1.0, recognizer="embed")
    d.enqueue(roi("fresh", recognizer="embed"))
    assert {f.worker for f in dispatch_all(d, now=1.0)} == {"real"}  # r0 and fresh: only it has credit
    for roi_id in ("r0", "fresh"):
        assert d.complete(roi_id, "real") is not None
    taken = d.overdue(21.5)
    assert len(taken) == 1023 and all(worker.startswith("fake") for worker, _ in taken)
    for _, flights in taken:
        d.requeue(flights)
    assert d.queued == 1023 and d.in_flight == 0
    served = []
    while flights := dispatch_all(d, now=22.0):
        assert {f.worker for f in flights} == {"real"}  # the fakes have no credit left
        for flight in flights:
            served.append(d.complete(flight.pending.roi_id, "real").pending.roi_id)
    assert sorted(served) == sorted(f"r{i}" for i in range(1, 1024))

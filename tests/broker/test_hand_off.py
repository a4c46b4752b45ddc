"""The direct hand-off (``Dispatcher.hand_off``): an arriving ROI goes out at once exactly when the queued path would
send it at once, to the same worker, with the same books (pure policy, explicit time)."""

from __future__ import annotations

import copy
import random

import pytest

from vcascade.broker.dispatch import ByteBounds, Dispatcher, InFlight, Pending


def roi(roi_id: str, recognizer: str = "embed", camera: str = "cam", t: float = 0.0, ttl_ms: float = 0.0,
        size_bytes: int = 100, deferrable: bool = False) -> Pending:  # fmt: skip
    return Pending(roi_id=roi_id, camera=camera, received_s=t, ttl_ms=ttl_ms, recognizer=recognizer,
                   size_bytes=size_bytes, edge=b"e1", deferrable=deferrable)  # fmt: skip


def books(d: Dispatcher, flight: InFlight) -> tuple:
    """What a dispatch leaves behind, comparable between two dispatchers."""
    return (flight.pending.roi_id, flight.worker, flight.dispatched_s, flight.seq, flight.pending.attempts,
            d.load(flight.worker), d.queued, d.in_flight, d.queued_bytes)  # fmt: skip


def test_an_roi_arriving_to_empty_queues_goes_where_the_queued_path_sends_it():
    direct, queued = Dispatcher(queue_max=10), Dispatcher(queue_max=10)
    for d in (direct, queued):
        d.worker_ready("w1", credits=2, now_s=0.0, recognizer="embed")
        d.worker_ready("w2", credits=4, now_s=0.0, recognizer="embed")
    flight = direct.hand_off(roi("r0"), now_s=1.0)
    assert queued.enqueue(roi("r0")) == []
    twin, stale = queued.next_dispatch(1.0)
    assert stale == [] and flight is not None and twin is not None
    assert books(direct, flight) == books(queued, twin)
    assert flight.dispatched_s == 1.0 and flight.pending.attempts == 1 and direct.queued == 0
    assert direct.complete("r0", flight.worker) is flight  # an ordinary flight: answered, re-queued, expired alike


def test_queued_rois_that_could_take_the_same_workers_keep_their_turn():
    d = Dispatcher(queue_max=10)
    d.worker_ready("w-embed", credits=0, now_s=0.0, recognizer="embed")
    d.worker_ready("w-text", credits=5, now_s=0.0, recognizer="text")
    d.enqueue(roi("e0", "embed"))  # waits: its workers have no credit
    assert d.hand_off(roi("t0", "text"), now_s=0.0) is not None  # other workers: not its rival
    assert d.hand_off(roi("e1", "embed", camera="cam-2"), now_s=0.0) is None  # same recognizer queued
    assert d.hand_off(roi("a0", ""), now_s=0.0) is None  # an ROI for any worker: anything queued goes first
    d.enqueue(roi("a1", ""))
    assert d.hand_off(roi("t1", "text"), now_s=0.0) is None  # an ROI for any worker could take w-text


def test_no_hand_off_without_credit_over_a_byte_bound_or_when_it_would_start_late():
    d = Dispatcher(queue_max=10, byte_bounds=ByteBounds(total=1000, recognizer=1000, edge=500))
    assert d.hand_off(roi("r0"), now_s=0.0) is None  # no worker at all
    d.worker_ready("w1", credits=1, now_s=0.0, recognizer="embed", start_delay_s=0.2)
    assert d.hand_off(roi("big", size_bytes=501), now_s=0.0) is None  # enqueue drops it as queue_full
    assert d.hand_off(roi("late", t=0.0, ttl_ms=150), now_s=0.0) is None  # stale when w1 would start it
    assert d.hand_off(roi("r1", t=0.0, ttl_ms=300), now_s=0.0) is not None
    assert d.hand_off(roi("r2"), now_s=0.0) is None  # w1's one credit is taken
    assert d.queued == 0 and d.in_flight == 1


def test_a_duplicate_roi_id_is_refused():
    d = Dispatcher(queue_max=10)
    d.worker_ready("w1", credits=1, now_s=0.0, recognizer="embed")
    assert d.hand_off(roi("r0"), now_s=0.0) is not None
    with pytest.raises(ValueError, match="duplicate"):
        d.hand_off(roi("r0"), now_s=0.0)


def test_at_a_full_queue_an_roi_handed_off_displaces_nothing():
    """The queued path would queue it first, over ``queue_max``, and drop the oldest ROI of the longest queue to make
    room for an ROI that then leaves at once; handed off, it never takes room, so nothing is dropped for it."""
    direct, queued = Dispatcher(queue_max=2), Dispatcher(queue_max=2)
    for d in (direct, queued):
        d.worker_ready("w-embed", credits=1, now_s=0.0, recognizer="embed")
        assert d.enqueue(roi("t0", "text")) == d.enqueue(roi("t1", "text")) == []  # no text worker: they wait
    assert direct.hand_off(roi("e0"), now_s=0.0) is not None and direct.queued == 2
    assert [p.roi_id for p in queued.enqueue(roi("e0"))] == ["t0"]
    assert queued.next_dispatch(0.0)[0].pending.roi_id == "e0"


@pytest.mark.parametrize("seed", range(4))
def test_an_roi_is_handed_off_only_where_the_queued_path_would_send_it_next(seed):
    """Random runs: arrivals (several recognizers, cameras, send-reason classes, deadlines), answers, credit changes
    and time, in rounds of a few events followed by a dispatch round, as the broker's loop handles what one poll
    returned (answers free credit before the round's dispatch, so servable ROIs can be queued when an ROI
    arrives). At every arrival a copy of the dispatcher takes the queued path: where the ROI is handed off, the
    copy dispatches it to the same worker with the same books, and whatever the copy dispatches before it goes to
    other workers (ROIs of other recognizers, which a hand-off does not make wait)."""
    rng = random.Random(seed)
    d = Dispatcher(queue_max=10_000)
    held: list[tuple[str, str]] = []  # (roi_id, worker) in flight
    handed = queued = 0
    now = 0.0
    workers = [("w1", "embed"), ("w2", "embed"), ("w3", "text"), ("w4", "")]
    for i in range(1000):
        now += rng.uniform(0, 0.01)
        event = rng.random()
        if event < 0.05:
            name, recognizer = rng.choice(workers)
            d.worker_ready(name, rng.randint(0, 3), now, recognizer, start_delay_s=rng.choice([0.0, 0.05]))
        elif event < 0.45 and held:
            assert d.complete(*held.pop(rng.randrange(len(held)))) is not None
        else:
            item = roi(f"r{i}", recognizer=rng.choice(["embed", "text", ""]), camera=rng.choice(["c1", "c2", "c3"]),
                       t=now, ttl_ms=rng.choice([0.0, 30.0, 200.0]), deferrable=rng.random() < 0.3)  # fmt: skip
            twin, twin_item = copy.deepcopy(d), copy.deepcopy(item)
            flight = d.hand_off(item, now)
            if flight is None:
                queued += 1
                assert d.enqueue(item) == []
            else:
                handed += 1
                held.append((flight.pending.roi_id, flight.worker))
                assert twin.enqueue(twin_item) == []
                before = []  # what the queued path sends first: ROIs that cannot take the item's worker
                while (twin_flight := twin.next_dispatch(now)[0]).pending.roi_id != item.roi_id:
                    before.append(twin_flight.worker)
                assert flight.worker not in before
                assert books(d, flight)[:6] == books(twin, twin_flight)[:6]
        if rng.random() < 0.6:
            continue  # more events in this poll round
        while True:
            flight, _ = d.next_dispatch(now)
            if flight is None:
                break
            held.append((flight.pending.roi_id, flight.worker))
    assert handed > 20 and queued > 20, (handed, queued)  # both paths were taken many times

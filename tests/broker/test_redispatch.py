"""The pure dispatch policy when workers are lost: bounded re-dispatch, late answers, and randomized invariants."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import vcascade.broker.dispatch as dispatch_module
from vcascade.broker.dispatch import ByteBounds, Dispatcher, InFlight, Pending


def roi(roi_id: str, camera: str = "cam", t: float = 0.0, ttl_ms: float = 0.0) -> Pending:
    return Pending(roi_id=roi_id, camera=camera, received_s=t, ttl_ms=ttl_ms)


def dispatch_all(d: Dispatcher, now: float = 0.0) -> list[InFlight]:
    out = []
    while (flight := d.next_dispatch(now)[0]) is not None:
        out.append(flight)
    return out


def ids(items) -> list[str]:
    return [getattr(item, "pending", item).roi_id for item in items]


def test_lost_rois_go_back_to_the_head_of_their_camera_queue_in_order():
    d = Dispatcher(queue_max=100)
    d.worker_ready("w1", 3, 0.0)
    for i in range(5):
        d.enqueue(roi(f"A{i}", "A"))
    d.enqueue(roi("B0", "B"))
    assert ids(dispatch_all(d)) == ["A0", "B0", "A1"]
    given_up, dropped = d.requeue(d.worker_gone("w1"))
    assert given_up == [] and dropped == []
    assert d.queued == 6 and d.in_flight == 0 and "A0" in d
    d.worker_ready("w2", 10, 1.0)
    assert ids(dispatch_all(d, 1.0)) == ["A0", "B0", "A1", "A2", "A3", "A4"]  # FIFO per camera kept


def test_attempts_are_bounded_by_max_attempts():
    d = Dispatcher(queue_max=10, max_attempts=3)
    d.enqueue(roi("r"))
    for attempt in (1, 2, 3):
        d.worker_ready(f"w{attempt}", 1, 0.0)
        (flight,) = dispatch_all(d)
        assert flight.worker == f"w{attempt}" and flight.pending.attempts == attempt
        given_up, _ = d.requeue(d.worker_gone(f"w{attempt}"))
    assert ids(given_up) == ["r"] and "r" not in d and d.queued == 0


def test_max_attempts_one_never_redispatches():
    d = Dispatcher(queue_max=10, max_attempts=1)
    d.worker_ready("w", 2, 0.0)
    d.enqueue(roi("r0"))
    d.enqueue(roi("r1"))
    dispatch_all(d)
    given_up, dropped = d.requeue(d.worker_gone("w"))
    assert sorted(ids(given_up)) == ["r0", "r1"] and dropped == [] and d.queued == 0


def test_requeue_beyond_queue_max_drops_the_oldest_of_the_longest_queue():
    d = Dispatcher(queue_max=3)
    d.worker_ready("w", 2, 0.0)
    d.enqueue(roi("r0"))
    d.enqueue(roi("r1"))
    assert ids(dispatch_all(d)) == ["r0", "r1"]
    for i in range(2, 5):
        assert d.enqueue(roi(f"r{i}")) == []
    given_up, dropped = d.requeue(d.worker_gone("w"))
    assert given_up == [] and ids(dropped) == ["r0", "r1"]  # the re-queued ones are the oldest
    assert d.queued == 3 and [p.roi_id for p in d.drain()] == ["r2", "r3", "r4"]


def test_answer_from_a_worker_the_roi_was_taken_from_is_late_not_accepted():
    d = Dispatcher(queue_max=10)
    d.worker_ready("w1", 1, 0.0)
    d.enqueue(roi("r"))
    dispatch_all(d)
    d.requeue(d.worker_gone("w1"))
    d.worker_ready("w2", 1, 0.0)
    dispatch_all(d)
    assert d.complete("r", "w1") is None and d.was_taken_from("r", "w1")
    assert not d.was_taken_from("r", "w2") and not d.was_taken_from("other", "w1")
    assert d.complete("r", "w2").worker == "w2"
    assert d.complete("r", "w1") is None and d.was_taken_from("r", "w1")  # still late after completion


def test_taken_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(dispatch_module, "TAKEN_MEMORY", 4)
    d = Dispatcher(queue_max=100, max_attempts=1)
    d.worker_ready("w", 10, 0.0)
    for i in range(10):
        d.enqueue(roi(f"r{i}"))
    dispatch_all(d)
    d.requeue(d.worker_gone("w"))
    assert [d.was_taken_from(f"r{i}", "w") for i in range(10)] == [False] * 6 + [True] * 4


def test_stale_requeued_roi_is_dropped_not_redispatched():
    d = Dispatcher(queue_max=10)
    d.worker_ready("w1", 1, 0.0)
    d.enqueue(roi("r", t=0.0, ttl_ms=100))
    dispatch_all(d, 0.05)
    d.requeue(d.worker_gone("w1"))
    d.worker_ready("w2", 1, 0.2)
    flight, stale = d.next_dispatch(0.2)
    assert flight is None and ids(stale) == ["r"]


def test_max_attempts_below_one_rejected():
    with pytest.raises(ValueError):
        Dispatcher(queue_max=1, max_attempts=0)


# ---------------------------------------------------------------- randomized invariants


class _Model:
    """Drives a Dispatcher with random events and keeps the books the broker keeps."""

    def __init__(self, rng: random.Random, queue_max: int, max_attempts: int) -> None:
        self.rng = rng
        self.bounds = ByteBounds(total=2000, recognizer=1500, edge=1000)
        self.d = Dispatcher(queue_max=queue_max, max_workers=6, max_attempts=max_attempts, worker_timeout_s=0.5,
                            byte_bounds=self.bounds, answer_timeout_s=1.0)  # fmt: skip
        self.now = 0.0
        self.next_id = 0
        self.next_worker = 0
        self.ended: Counter[str] = Counter()  # roi_id -> times it ended (answered or dropped)
        self.sent: set[str] = set()
        self.holder: dict[str, str] = {}

    def end(self, items, how: str) -> None:
        for item in items:
            pending = getattr(item, "pending", item)
            self.ended[pending.roi_id] += 1
            self.holder.pop(pending.roi_id, None)

    def step(self) -> None:
        self.now += self.rng.choice([0.0, 0.001, 0.01, 0.1])
        event = self.rng.choices(
            ["roi", "ready", "dispatch", "answer", "late", "gone", "expire", "stale", "overdue"],
            [30, 6, 25, 20, 4, 3, 2, 4, 2],
        )[0]
        getattr(self, f"_{event}")()
        self.check()

    def _roi(self) -> None:
        roi_id = f"r{self.next_id}"
        self.next_id += 1
        self.sent.add(roi_id)
        ttl = self.rng.choice([0.0, 0.0, 50.0, 500.0])
        item = roi(roi_id, self.rng.choice("ABC"), self.now, ttl)
        item.size_bytes, item.edge = self.rng.randint(1, 400), self.rng.choice([b"e1", b"e2"])
        self.end(self.d.enqueue(item), "queue_full")

    def _ready(self) -> None:
        workers = [f"w{i}" for i in range(self.next_worker)]
        if workers and self.rng.random() < 0.6:
            worker = self.rng.choice(workers)
        else:
            worker, self.next_worker = f"w{self.next_worker}", self.next_worker + 1
        for _, flights in self.d.make_room(worker):  # a new worker at max_workers: the least useful goes
            self._requeue(flights)
        try:
            self.d.worker_ready(worker, self.rng.randint(0, 4), self.now)
        except dispatch_module.WorkerLimit:
            assert self.d.workers == 6

    def _dispatch(self) -> None:
        flight, stale = self.d.next_dispatch(self.now)
        self.end(stale, "stale")
        if flight is not None:
            load, credits = self.d.load(flight.worker), self.d.credits(flight.worker)
            assert load <= credits, f"{flight.worker} holds {load} > {credits} credits"
            assert flight.pending.attempts <= self.d.max_attempts
            self.holder[flight.pending.roi_id] = flight.worker

    def _answer(self) -> None:
        if self.holder:
            roi_id = self.rng.choice(sorted(self.holder))
            flight = self.d.complete(roi_id, self.holder[roi_id])
            assert flight is not None
            self.end([flight], "answered")

    def _late(self) -> None:
        roi_id = f"r{self.rng.randrange(max(1, self.next_id))}"
        worker = f"w{self.rng.randrange(max(1, self.next_worker))}"
        if self.holder.get(roi_id) != worker:
            assert self.d.complete(roi_id, worker) is None  # only the holder's answer counts

    def _requeue(self, flights: list[InFlight]) -> None:
        for flight in flights:
            self.holder.pop(flight.pending.roi_id, None)
        given_up, dropped = self.d.requeue(flights)
        assert all(p.attempts >= self.d.max_attempts for p in given_up)
        self.end(given_up, "worker_lost")
        self.end(dropped, "queue_full")

    def _gone(self) -> None:
        if self.next_worker:
            self._requeue(self.d.worker_gone(f"w{self.rng.randrange(self.next_worker)}"))

    def _expire(self) -> None:
        for _, flights in self.d.expire_workers(self.now):
            self._requeue(flights)

    def _stale(self) -> None:
        self.end(self.d.stale(self.now), "stale")

    def _overdue(self) -> None:
        for _, flights in self.d.overdue(self.now):
            self._requeue(flights)

    def check(self) -> None:
        d = self.d
        assert d.queued <= d.queue_max and d.queued_bytes <= self.bounds.total
        assert d.in_flight == len(self.holder)
        assert all(n == 1 for n in self.ended.values()), [r for r, n in self.ended.items() if n > 1]
        open_ids = self.sent - set(self.ended)
        assert all(roi_id in d for roi_id in open_ids)  # every ROI not ended is queued or in flight
        assert d.queued + d.in_flight == len(open_ids)
        assert d.workers <= d.max_workers and len(d._taken) <= dispatch_module.TAKEN_MEMORY  # memory bounds

    def finish(self) -> None:
        self.end(self.d.drain(), "shutdown")
        self.end(self.d.drain_in_flight(), "shutdown")
        self.holder.clear()
        assert set(self.ended) == self.sent and all(n == 1 for n in self.ended.values())


@pytest.mark.parametrize("seed", range(40))
def test_random_event_sequences_keep_every_invariant(seed):
    rng = random.Random(seed)
    model = _Model(rng, queue_max=rng.choice([1, 3, 20]), max_attempts=rng.choice([1, 2, 3]))
    for _ in range(400):
        model.step()
    model.finish()

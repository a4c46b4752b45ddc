"""Stage engine scheduling: micro-batches in flight, matching under random completion order, failing stages."""

from __future__ import annotations

import queue
import random
import threading
import time

import pytest

from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.stages.engine import AsyncStage, StageEngine


def _batch(seq: int, rows: int) -> MicroBatch:
    items = [f"roi-{seq}-{r}" for r in range(rows)]
    return MicroBatch(seq, items, [f"roi-{seq}-{r}" for r in range(rows)], 0.0, 0.0)


class _Recorder:
    """Sink and error callback; checks that every micro-batch ends exactly once."""

    def __init__(self) -> None:
        self.done: list[MicroBatch] = []
        self.failed: list[tuple[int, str, str]] = []
        self.lock = threading.Lock()

    def sink(self, batch: MicroBatch) -> None:
        with self.lock:
            self.done.append(batch)

    def on_error(self, batch: MicroBatch, where: str, exc: BaseException) -> None:
        with self.lock:
            self.failed.append((batch.seq, where, type(exc).__name__))

    def ended(self) -> list[int]:
        return sorted([b.seq for b in self.done] + [seq for seq, _, _ in self.failed])


def _tag(name: str, delays: random.Random | None = None, fail_every: int = 0):
    """A stage appending ``name`` to each row, after a seeded random sleep; raises on every n-th row count."""
    lock = threading.Lock()

    def run(rows):
        if delays is not None:
            with lock:
                delay = delays.uniform(0, 0.01)
            time.sleep(delay)
        if fail_every and len(rows) % fail_every == 0:
            raise RuntimeError(f"{name} fails batches of {len(rows)} rows")
        return [f"{row}/{name}" for row in rows]

    return run


class _ThreadPoolStage:
    """A real asynchronous stage: a pool of threads computing micro-batches with seeded random delays, so they
    complete out of order (like a remote stage group with several micro-batches in flight)."""

    def __init__(self, seed: int, num_stages: int = 2, workers: int = 4, fail_seq: int = -1) -> None:
        self.num_stages = num_stages
        self.fail_seq = fail_seq
        self._rng = random.Random(seed)
        self._work: queue.Queue = queue.Queue()
        self._workers = workers
        self._pending = 0
        self._cond = threading.Condition()
        self.completion_order: list[int] = []

    def start(self, done, fail) -> None:
        self._done, self._fail = done, fail
        for _ in range(self._workers):
            threading.Thread(target=self._serve, daemon=True).start()

    def send(self, batch: MicroBatch) -> None:
        with self._cond:
            self._pending += 1
            delay = self._rng.uniform(0, 0.03)
        self._work.put((batch, delay))

    def _serve(self) -> None:
        while (job := self._work.get()) is not None:
            batch, delay = job
            time.sleep(delay)
            if batch.seq == self.fail_seq:
                self._fail(batch, RuntimeError("remote"))
            else:
                batch.data = [f"{row}/remote" for row in batch.data]
                batch.mark(time.perf_counter())
                batch.mark(time.perf_counter(), "link")
                with self._cond:
                    self.completion_order.append(batch.seq)
                self._done(batch, [delay / 2, delay / 2])
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout=None if timeout_s == float("inf") else timeout_s)

    def close(self) -> None:
        for _ in range(self._workers):
            self._work.put(None)


def _assert_matched(batch: MicroBatch, suffix: str) -> None:
    assert len(batch.data) == len(batch.items)
    for item, row in zip(batch.items, batch.data):  # row r belongs to items[r], whatever the order
        assert row == f"{item}{suffix}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_results_stay_matched_to_their_rois_when_an_async_stage_completes_out_of_order(seed):
    rng = random.Random(seed)
    remote = _ThreadPoolStage(seed)
    assert isinstance(remote, AsyncStage)
    recorder, computed = _Recorder(), []
    engine = StageEngine([_tag("s0", random.Random(seed)), remote], 2, recorder.sink, recorder.on_error,
                         on_compute=lambda index, s: computed.append(index), max_in_flight=6)
    assert engine.num_stages == 3 and set(engine.queue_depths()) == {"stage0", "stage1", "head"}
    engine.start()
    n = 40
    for seq in range(n):
        engine.submit(_batch(seq, rng.randint(1, 5)))
    assert engine.stop(timeout_s=60)
    assert remote.completion_order != sorted(remote.completion_order)  # really out of order
    assert sorted(b.seq for b in recorder.done) == list(range(n)) and not recorder.failed
    for batch in recorder.done:
        _assert_matched(batch, "/s0/remote")
        assert batch.hop_names() == ["stage0", "stage1", "link"]
    assert sorted(computed) == sorted([0] * n + [1] * n + [2] * n)  # remote compute times under their indices
    assert engine.in_flight == 0


def test_max_batches_in_flight_is_respected_and_submit_blocks():
    gate, active, peak, lock = threading.Event(), [0], [0], threading.Lock()

    def gated(rows):
        gate.wait(30)
        return rows

    recorder = _Recorder()

    def sink(batch):
        with lock:
            active[0] -= 1
        recorder.sink(batch)

    engine = StageEngine([gated, lambda rows: rows], 8, sink, recorder.on_error, max_in_flight=3)
    engine.start()
    for seq in range(3):
        engine.submit(_batch(seq, 1), timeout_s=5)
        with lock:
            active[0] += 1
    assert engine.in_flight == 3
    with pytest.raises(queue.Full):  # queues have room (8) but 3 are in flight: back-pressure
        engine.submit(_batch(3, 1), timeout_s=0.3)
    gate.set()
    for seq in range(3, 30):
        engine.submit(_batch(seq, 1), timeout_s=30)
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        assert engine.in_flight <= 3
    assert engine.stop(timeout_s=30)
    assert peak[0] <= 3 and sorted(b.seq for b in recorder.done) == list(range(30)) and engine.in_flight == 0


def test_failing_stages_fail_only_their_micro_batches_and_free_their_slots():
    remote = _ThreadPoolStage(seed=7, num_stages=1, fail_seq=10)
    recorder = _Recorder()

    def head(batch):
        if batch.seq == 5:
            raise ValueError("head")
        recorder.sink(batch)

    engine = StageEngine([_tag("s0", fail_every=4), remote], 1, head, recorder.on_error, max_in_flight=2)
    engine.start()
    sizes = [(seq % 4) + 1 for seq in range(24)]  # every 4th micro-batch has 4 rows: stage 0 raises on it
    for seq, rows in enumerate(sizes):
        engine.submit(_batch(seq, rows), timeout_s=30)  # would block forever if a failure leaked a slot
    assert engine.stop(timeout_s=60)
    assert recorder.ended() == list(range(24))  # every micro-batch ended exactly once
    failed = {seq: where for seq, where, _ in recorder.failed}
    assert failed == {**{seq: "stage0" for seq in range(3, 24, 4)}, 10: "stage1", 5: "head"}
    for batch in recorder.done:
        _assert_matched(batch, "/s0/remote")
    assert engine.in_flight == 0


def test_torch_threads_per_stage_are_set_in_each_stage_thread():
    import torch

    seen = []
    recorder = _Recorder()
    engine = StageEngine([lambda rows: seen.append(torch.get_num_threads()) or rows], 1, recorder.sink,
                         recorder.on_error, threads_per_stage=1)
    engine.start()
    engine.submit(_batch(0, 1))
    assert engine.stop(timeout_s=10)
    assert seen == [1]


def test_a_stage_group_engine_names_its_stages_in_the_recognizers_numbering():
    recorder, computed = _Recorder(), []
    engine = StageEngine([_tag("a"), _tag("b", fail_every=2)], 1, recorder.sink, recorder.on_error,
                         on_compute=lambda index, s: computed.append(index), first_stage_index=2)
    assert engine.num_stages == 2 and set(engine.queue_depths()) == {"stage2", "stage3", "head"}
    engine.start()
    engine.submit(_batch(0, 1))
    engine.submit(_batch(1, 2))
    assert engine.stop(timeout_s=10)
    assert sorted(computed) == [2, 2, 3] and recorder.failed == [(1, "stage3", "RuntimeError")]

"""Stage engine: pipelining overlap, failure isolation, result/ROI matching, clean stop."""

from __future__ import annotations

import threading
import time

from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.stages.engine import StageEngine


def _batch(seq: int, rows: int = 2) -> MicroBatch:
    now = time.perf_counter()
    items = [f"roi-{seq}-{r}" for r in range(rows)]  # the engine never looks inside items
    return MicroBatch(seq, items, [(seq, r) for r in range(rows)], now, now)


class _Collector:
    def __init__(self) -> None:
        self.done: list[MicroBatch] = []
        self.errors: list[tuple[int, str, str]] = []
        self.lock = threading.Lock()

    def sink(self, batch: MicroBatch) -> None:
        with self.lock:
            self.done.append(batch)

    def on_error(self, batch: MicroBatch, where: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append((batch.seq, where, str(exc)))


def test_stage_error_fails_only_that_micro_batch_and_results_stay_matched():
    collector = _Collector()

    def add_one(data):
        return [(seq, row, "s0") for seq, row in data]

    def explode_on_batch_2(data):
        if data[0][0] == 2:
            raise RuntimeError("boom")
        return [(seq, row, tag, "s1") for seq, row, tag in data]

    engine = StageEngine([add_one, explode_on_batch_2], 2, collector.sink, collector.on_error)
    engine.start()
    for seq in range(5):
        engine.submit(_batch(seq, rows=seq + 1))
    assert engine.stop(timeout_s=10)
    assert collector.errors == [(2, "stage1", "boom")]
    assert [b.seq for b in collector.done] == [0, 1, 3, 4]
    for batch in collector.done:
        assert len(batch.data) == len(batch.items)
        for item, row_data in zip(batch.items, batch.data):  # row r of the data belongs to items[r]
            assert item == f"roi-{row_data[0]}-{row_data[1]}" and row_data[2:] == ("s0", "s1")
        assert len(batch.t_stage_done_s) == 2
        assert batch.t_ready_s <= batch.t_stage_done_s[0] <= batch.t_stage_done_s[1]


def test_sink_error_is_reported_as_head_and_engine_keeps_serving():
    collector = _Collector()

    def sink(batch):
        if batch.seq == 0:
            raise ValueError("bad head")
        collector.sink(batch)

    engine = StageEngine([lambda d: d], 1, sink, collector.on_error)
    engine.start()
    engine.submit(_batch(0))
    engine.submit(_batch(1))
    assert engine.stop(timeout_s=10)
    assert collector.errors == [(0, "head", "bad head")]
    assert [b.seq for b in collector.done] == [1]


def test_two_stages_overlap_on_consecutive_micro_batches():
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    compute: list[tuple[int, float]] = []

    def sleeper(stage: int):
        def run(data):
            start = time.perf_counter()
            time.sleep(0.05)
            spans[(stage, data)] = (start, time.perf_counter())
            return data
        return run

    collector = _Collector()
    engine = StageEngine([sleeper(0), sleeper(1)], 2, collector.sink, collector.on_error,
                         on_compute=lambda index, s: compute.append((index, s)))
    engine.start()
    n = 6
    for seq in range(n):
        engine.submit(MicroBatch(seq, [seq], seq, 0.0, 0.0))
    assert engine.stop(timeout_s=10)
    assert [b.seq for b in collector.done] == list(range(n))
    for i in range(n - 1):  # stage 1 started batch i before stage 0 finished batch i+1: both busy at once
        assert spans[(1, i)][0] < spans[(0, i + 1)][1]
    assert len(compute) == 2 * n and all(s >= 0.05 for _, s in compute)


def test_stop_finishes_submitted_work_and_reports_queue_depths():
    collector = _Collector()
    engine = StageEngine([lambda d: d, lambda d: d, lambda d: d], 3, collector.sink, collector.on_error)
    assert set(engine.queue_depths()) == {"stage0", "stage1", "stage2", "head"}
    engine.start()
    for seq in range(10):
        engine.submit(_batch(seq))
    assert engine.stop(timeout_s=10)
    assert [b.seq for b in collector.done] == list(range(10))
    assert all(depth == 0 for depth in engine.queue_depths().values())

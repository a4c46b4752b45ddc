"""vcascade_worker_queue_depth moves when micro-batches wait before a busy stage (the worker's IO thread copies
StageEngine.queue_depths into the gauge about once a second; a lightly loaded demo keeps it at 0, so the
metrics e2e test cannot stage it reliably and points here)."""

import threading
import time

from prometheus_client import REGISTRY

from vcascade.center.metrics import WorkerTelemetry
from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.stages.engine import StageEngine


def test_worker_queue_depth_gauge_shows_micro_batches_waiting_before_a_busy_stage():
    release = threading.Event()
    done: list[int] = []

    def busy_stage(data):
        release.wait(30)  # stage 0 holds its first micro-batch: the next ones queue before it
        return data

    engine = StageEngine([busy_stage], queue_size=4, sink=lambda b: done.append(b.seq), on_error=lambda *a: None)
    engine.start()
    telemetry = WorkerTelemetry("w-queue")
    for seq in range(4):
        engine.submit(MicroBatch(seq, [], (seq,), 0.0, 0.0), timeout_s=5)
    deadline = time.monotonic() + 10
    while engine.queue_depths()["stage0"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    telemetry.queue_depths(engine.queue_depths())  # what the worker's IO thread does every second
    assert REGISTRY.get_sample_value("vcascade_worker_queue_depth", {"worker": "w-queue", "queue": "stage0"}) >= 3
    release.set()
    assert engine.stop(10)
    telemetry.queue_depths(engine.queue_depths())
    assert REGISTRY.get_sample_value("vcascade_worker_queue_depth", {"worker": "w-queue", "queue": "stage0"}) == 0
    assert done == [0, 1, 2, 3]

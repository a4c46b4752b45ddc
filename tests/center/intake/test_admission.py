"""Deadline-aware admission at the worker: the estimate, and a real worker that drops what cannot start in time."""

from __future__ import annotations

import time

import pytest

from tests.center.stages.test_calibrated import calibrated_worker, roi_header
from vcascade.center.intake.microbatch import EWMA_WEIGHT, StartEstimate
from vcascade.core.protocol import wire


def test_no_wait_before_any_measurement_or_with_nothing_ahead():
    estimate = StartEstimate()
    estimate.submitted()
    assert estimate.start_delay_ms() == 0.0
    estimate.first_stage_done(0.1)
    assert estimate.ahead == 0 and estimate.start_delay_ms() == 0.0


def test_wait_is_the_micro_batches_ahead_times_the_mean_stage_time_the_computing_one_half():
    estimate = StartEstimate()
    estimate.submitted()
    estimate.first_stage_done(0.100)
    for _ in range(3):
        estimate.submitted()
    assert estimate.start_delay_ms() == pytest.approx(2.5 * 100.0)
    estimate.first_stage_done(0.200)  # the mean moves by EWMA_WEIGHT of the difference
    assert estimate.start_delay_ms() == pytest.approx(1.5 * (100.0 + EWMA_WEIGHT * 100.0))


def test_a_failed_micro_batch_leaves_the_queue_and_the_mean_unchanged():
    estimate = StartEstimate()
    estimate.submitted()
    estimate.first_stage_done(0.05)
    estimate.submitted()
    estimate.submitted()
    estimate.first_stage_done(None)
    assert estimate.ahead == 1 and estimate.start_delay_ms() == pytest.approx(25.0)
    estimate.first_stage_done(None)
    estimate.first_stage_done(None)
    assert estimate.ahead == 0


def test_worker_drops_before_compute_what_would_start_past_its_deadline(demo_raw, free_port, crops):
    """A 1-ROI micro-batch takes 200 ms; 8 ROIs with 450 ms to start: the first three start in time
    (0, 200, 400 ms), the others would start at 600 ms or later and are dropped as stale without compute."""
    worker = calibrated_worker(demo_raw, free_port, {"1": 200.0}, max_batch=1, max_wait_ms=0, credits=16,
                               stage_queue=8)  # fmt: skip
    with worker as (router, identity):
        answers = {}
        for seq, count in enumerate((1, 8)):  # the first ROI measures the stage; then the burst
            sent_s = time.perf_counter()
            for i in range(count):
                router.send_multipart([identity, wire.encode(roi_header(f"r{seq}-{i}", ttl_ms=450.0)), crops["car"]])
            while sum(key.startswith(f"r{seq}-") for key in answers) < count:
                assert router.poll(10_000), f"answers so far: {answers}"
                message = wire.decode(router.recv_multipart()[1])
                if isinstance(message, (wire.Result, wire.Drop)):
                    answers[message.roi_id] = (message, (time.perf_counter() - sent_s) * 1000.0)
        burst = [answers[f"r1-{i}"] for i in range(8)]
        results = [ms for message, ms in burst if isinstance(message, wire.Result)]
        dropped = [message.reason for message, _ in burst if isinstance(message, wire.Drop)]
        assert isinstance(answers["r0-0"][0], wire.Result)
        assert 2 <= len(results) <= 3 and dropped == ["stale"] * (8 - len(results))
        assert all(ms <= 450.0 + 200.0 + 150.0 for ms in results)  # started in time: done by ttl + one batch

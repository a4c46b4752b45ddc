"""The ``calibrated`` stage runtime: service times from measured points, the stage, the config, a real worker."""

from __future__ import annotations

import contextlib
import copy
import threading
import time

import numpy as np
import pytest
import zmq
from pydantic import ValidationError

from vcascade.center.stages.calibrated import CalibratedStage, service_time_ms
from vcascade.center.stages.runtimes import load_recognizer_stages
from vcascade.center.worker import run_worker
from vcascade.core.schema import WorkerSettings
from vcascade.core.protocol import wire
from vcascade.core.config import CalibratedRecognizerConfig, Deployment
from vcascade.core.transport.sockets import make_socket

TABLE = {1: 10.0, 4: 16.0, 8: 24.0}


@pytest.mark.parametrize(
    ("batch", "expected_ms"),
    [(1, 10.0), (4, 16.0), (2, 12.0), (6, 20.0), (12, 32.0), (16, 40.0)],
)
def test_service_time_interpolates_between_and_extrapolates_beyond_measured_sizes(batch, expected_ms):
    assert service_time_ms(TABLE, batch) == pytest.approx(expected_ms)


def test_service_time_below_smallest_size_is_its_time_and_one_point_scales_linearly():
    assert service_time_ms({4: 20.0}, 2) == 20.0
    assert service_time_ms({4: 20.0}, 8) == 40.0


def test_service_time_refuses_empty_table_and_empty_batch():
    with pytest.raises(ValueError, match="non-empty"):
        service_time_ms({}, 1)
    with pytest.raises(ValueError, match="batch >= 1"):
        service_time_ms(TABLE, 0)


def test_stage_takes_the_service_time_and_returns_a_deterministic_output():
    waited: list[float] = []
    stage = CalibratedStage(TABLE, output_dim=4, sleep=waited.append)
    x = np.arange(6 * 3 * 2 * 2, dtype=np.float32).reshape(6, 3, 2, 2)
    (out,) = stage((x,))
    assert waited == [pytest.approx(0.020)]
    assert out.shape == (6, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(out, x.reshape(6, -1)[:, :4])


def test_stage_pads_an_output_wider_than_the_crop_tensor():
    (out,) = CalibratedStage({1: 0.0}, output_dim=5, sleep=lambda s: None)((np.ones((2, 1, 1, 2), np.float32),))
    np.testing.assert_array_equal(out, [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0]])


def test_stage_really_waits():
    stage = CalibratedStage({2: 30.0}, output_dim=2)
    start = time.perf_counter()
    stage((np.zeros((2, 3, 4, 4), np.float32),))
    assert time.perf_counter() - start >= 0.029


def _recognizer(**fields) -> dict:
    return {"type": "calibrated", "service_ms": {"8": 24.0, "1": 10.0}, "input_hw": [16, 16],
            "head": {"type": "classifier", "labels": ["a", "b"]}, **fields}  # fmt: skip


def test_config_sorts_the_table_and_refuses_bad_points_and_split_points():
    rec = CalibratedRecognizerConfig.model_validate(_recognizer())
    assert list(rec.service_ms.items()) == [(1, 10.0), (8, 24.0)]
    for bad in ({"service_ms": {"0": 1.0}}, {"service_ms": {"2": -1.0}}, {"service_ms": {}},
                {"split_points": ["x"]}, {"split_points": "auto"}):  # fmt: skip
        with pytest.raises(ValidationError):
            CalibratedRecognizerConfig.model_validate(_recognizer(**bad))


def test_registry_builds_one_stage_on_one_device():
    rec = CalibratedRecognizerConfig.model_validate(_recognizer())
    stages = load_recognizer_stages(rec, ["cpu"])
    assert len(stages) == 1 and isinstance(stages[0], CalibratedStage)
    with pytest.raises(ValueError, match="one device"):
        load_recognizer_stages(rec, ["cpu", "cpu"])


@contextlib.contextmanager
def calibrated_worker(demo_raw: dict, free_port, service_ms: dict, **worker_fields):
    """A real worker thread running a ``calibrated`` recognizer, the test playing its broker: yields the broker's
    ROUTER and the worker's identity (after its first Ready, whose credits are checked); stops it after."""
    raw = copy.deepcopy(demo_raw)
    for key in ("frontend_port", "backend_port", "metrics_port"):
        raw["brokers"]["broker-1"][key] = free_port()
    raw["edges"]["edge-1"].update(metrics_port=free_port(), sinks=[])
    raw["recognizers"]["sim"] = _recognizer(service_ms=service_ms)
    raw["workers"]["worker-1"].update(recognizer="sim", devices=["cpu"], metrics_port=free_port(), **worker_fields)
    deployment = Deployment.model_validate(raw)
    router = make_socket(zmq.Context.instance(), zmq.ROUTER)
    router.bind(deployment.brokers["broker-1"].endpoint("backend", bind=True))
    stop = threading.Event()
    settings = WorkerSettings.from_deployment(deployment, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop), daemon=True)
    thread.start()
    try:
        assert router.poll(60_000), "no Ready"
        identity, header = router.recv_multipart()
        assert wire.decode(header).credits == worker_fields["credits"]
        yield router, identity
    finally:
        stop.set()
        thread.join(15)
        router.close()


def roi_header(roi_id: str, ttl_ms: float = 0.0) -> wire.Roi:
    """An ROI header for a 9x9 crop of camera street-1."""
    return wire.Roi(roi_id=roi_id, camera="street-1", frame_seq=1, stream_ts_ms=0.0, capture_unix_ms=1.7e12,
                    xyxy=(0.0, 0.0, 9.0, 9.0), crop_xyxy=(0, 0, 9, 9), class_id=0, score=0.9, ttl_ms=ttl_ms)  # fmt: skip


def test_worker_with_calibrated_runtime_answers_after_the_service_time(demo_raw, free_port, crops):
    service_ms = {"1": 150.0, "4": 200.0}
    with calibrated_worker(demo_raw, free_port, service_ms, max_batch=4, max_wait_ms=5, credits=8) as (router, identity):
        sent_s = time.perf_counter()
        router.send_multipart([identity, wire.encode(roi_header("r-1")), crops["car"]])
        answer = None
        while answer is None:
            assert router.poll(10_000), "no answer"
            message = wire.decode(router.recv_multipart()[1])
            answer = message if isinstance(message, wire.Result) else None
        assert answer.roi_id == "r-1" and answer.output.labels[0] in ("a", "b")
        assert time.perf_counter() - sent_s >= 0.150
        assert dict(answer.hops)["stage0"] >= 149.0


def test_worker_on_three_brokers_takes_every_brokers_credits_without_overload(demo_raw, free_port, crops):
    """Regression (issue 21, found by the scale harness with 4 brokers): the batcher's inbox held 2 x credits,
    but credits are per broker, so a worker on several brokers answered ROIs within its credits as ``overload``."""
    raw = copy.deepcopy(demo_raw)
    extra = {name: {"frontend_port": free_port(), "backend_port": free_port(), "metrics_port": free_port()}
             for name in ("broker-2", "broker-3")}  # fmt: skip
    raw["brokers"].update(extra)
    raw["workers"]["worker-1"]["brokers"] = ["broker-1", *extra]
    others = [make_socket(zmq.Context.instance(), zmq.ROUTER) for _ in extra]
    worker = calibrated_worker(raw, free_port, {"1": 200.0}, max_batch=1, max_wait_ms=0, credits=4, stage_queue=1,
                               max_batches_in_flight=1)  # fmt: skip
    try:
        with worker as (router, identity):
            peers = [(router, identity)]
            for sock, cfg in zip(others, extra.values()):
                sock.bind(f"tcp://127.0.0.1:{cfg['backend_port']}")
                assert sock.poll(30_000), "no Ready"
                peers.append((sock, sock.recv_multipart()[0]))
            for n in range(4):  # each broker fills the 4 credits the worker gave it while the stage is busy
                for k, (sock, peer) in enumerate(peers):
                    sock.send_multipart([peer, wire.encode(roi_header(f"r{k}-{n}")), crops["car"]])
            answers = {}
            deadline_s = time.monotonic() + 30
            while len(answers) < 12 and time.monotonic() < deadline_s:
                for sock, _ in peers:
                    while sock.poll(20):
                        message = wire.decode(sock.recv_multipart()[1])
                        if isinstance(message, (wire.Result, wire.Drop)):
                            answers[message.roi_id] = message
            drops = {roi_id: m.reason for roi_id, m in answers.items() if isinstance(m, wire.Drop)}
            assert len(answers) == 12 and drops == {}
    finally:
        for sock in others:
            sock.close()

"""The worker over real ZeroMQ sockets, the test playing the broker (a ROUTER on the backend port)."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import zmq
from prometheus_client import REGISTRY

from vcascade.center.worker import run_worker
from vcascade.core.schema import WorkerSettings
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment
from vcascade.core.transport.sockets import make_socket


def _roi(roi_id: str, ttl_ms: float = 0.0) -> bytes:
    return wire.encode(wire.Roi(
        roi_id=roi_id, camera="street-1", frame_seq=150, stream_ts_ms=6000.0, capture_unix_ms=1.7e12,
        xyxy=(199.0, 44.0, 331.0, 268.0), crop_xyxy=(195, 40, 335, 272), class_id=1, score=0.8, ttl_ms=ttl_ms,
    ))


def _deployment(demo_raw: dict, free_port) -> Deployment:
    raw = copy.deepcopy(demo_raw)
    for key in ("frontend_port", "backend_port", "metrics_port"):
        raw["brokers"]["broker-1"][key] = free_port()
    raw["edges"]["edge-1"]["metrics_port"] = free_port()
    raw["edges"]["edge-1"]["sinks"] = []
    raw["workers"]["worker-1"].update(metrics_port=free_port(), max_batch=4, max_wait_ms=20, credits=16)
    return Deployment.model_validate(raw)


def _recv_header(router: zmq.Socket, timeout_s: float) -> tuple[bytes, wire.Message]:
    assert router.poll(int(timeout_s * 1000)), "nothing received from the worker"
    frames = router.recv_multipart()
    routing, header, _ = wire.split_message(frames, 1)
    return routing[0], header


def _wait_ready(router: zmq.Socket) -> bytes:
    deadline = time.monotonic() + 120  # model split takes a few seconds on a busy machine
    while time.monotonic() < deadline:
        identity, header = _recv_header(router, deadline - time.monotonic())
        if isinstance(header, wire.Ready):
            assert header.worker == "worker-1" and header.credits == 16
            return identity
    raise AssertionError("no Ready")


@pytest.fixture
def broker(demo_raw, free_port):
    deployment = _deployment(demo_raw, free_port)
    ctx = zmq.Context.instance()
    router = make_socket(ctx, zmq.ROUTER)
    router.bind(deployment.brokers["broker-1"].endpoint("backend", bind=True))
    yield deployment, router
    router.close()


def test_worker_answers_every_roi_once_counts_malformed_and_says_bye(broker, crops):
    deployment, router = broker
    stop = threading.Event()
    reports: list[dict] = []
    settings = WorkerSettings.from_deployment(deployment, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop, reports.append), daemon=True)
    thread.start()
    identity = _wait_ready(router)
    assert identity.startswith(b"worker-1-")

    good = {"r-bike150": crops["bike150"], "r-bike170": crops["bike170"], "r-car": crops["car"]}
    for roi_id, payload in good.items():
        router.send_multipart([identity, _roi(roi_id), payload])
    router.send_multipart([identity, _roi("r-garbage"), b"\xff\xd8\xff\xe0 this is not a JPEG"])
    router.send_multipart([identity, _roi("r-stale", ttl_ms=1e-3), crops["bike160"]])
    router.send_multipart([identity, b"\x80\x04 pickled header", b"payload"])

    answers: dict[str, wire.Message] = {}
    deadline = time.monotonic() + 60
    while len(answers) < 5 and time.monotonic() < deadline:
        _, header = _recv_header(router, deadline - time.monotonic())
        if isinstance(header, (wire.Result, wire.Drop)):
            assert header.roi_id not in answers, f"two answers for {header.roi_id}"
            answers[header.roi_id] = header
    assert set(answers) == {*good, "r-garbage", "r-stale"}

    assert answers["r-garbage"] == wire.Drop(roi_id="r-garbage", reason="decode_error", where="worker-1")
    assert answers["r-stale"] == wire.Drop(roi_id="r-stale", reason="stale", where="worker-1")
    for roi_id in good:
        result = answers[roi_id]
        assert isinstance(result, wire.Result) and result.worker == "worker-1"
        names = [name for name, _ in result.hops]
        assert names == ["batch_wait", "preprocess", "stage0", "stage1", "head"]
        assert all(ms > 0 for _, ms in result.hops), result.hops
        assert result.output.identity_id >= 0
    assert answers["r-bike170"].output.identity_id == answers["r-bike150"].output.identity_id
    assert answers["r-car"].output.identity_id != answers["r-bike150"].output.identity_id

    stop.set()
    thread.join(timeout=15)
    assert not thread.is_alive()
    byes = []
    while router.poll(2000):
        _, header = wire.split_message(router.recv_multipart(), 1)[:2]
        byes += [header] if isinstance(header, wire.Bye) else []
    assert byes == [wire.Bye(sender="worker-1")]

    final = reports[-1]
    assert final["final"] and not any(r["final"] for r in reports[:-1])
    assert final["rois"] == 5 and final["results"] == 3
    assert final["drops"] == {"decode_error": 1, "stale": 1}
    assert final["malformed"] == {"pickle": 1}
    assert set(final["stage_ms"]) == {"stage0", "stage1"}
    labels = {"worker": "worker-1", "reason": "pickle"}
    assert REGISTRY.get_sample_value("vcascade_worker_malformed_messages_total", labels) >= 1
    assert REGISTRY.get_sample_value("vcascade_worker_in_flight", {"worker": "worker-1"}) == 0


def test_stop_drains_micro_batches_in_flight_before_bye(broker, crops):
    deployment, router = broker
    stop = threading.Event()
    settings = WorkerSettings.from_deployment(deployment, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop, None), daemon=True)
    thread.start()
    identity = _wait_ready(router)
    received = lambda: REGISTRY.get_sample_value("vcascade_worker_rois_received_total", {"worker": "worker-1"}) or 0
    before = received()
    roi_ids = [f"drain-{i}" for i in range(6)]
    for i, roi_id in enumerate(roi_ids):
        router.send_multipart([identity, _roi(roi_id), crops[("bike150", "car", "roof")[i % 3]]])
    deadline = time.monotonic() + 30
    while received() < before + len(roi_ids) and time.monotonic() < deadline:
        time.sleep(0.001)
    stop.set()  # all six are inside the worker, most not computed yet

    order: list[wire.Message] = []
    while router.poll(5000):
        _, header = wire.split_message(router.recv_multipart(), 1)[:2]
        if not isinstance(header, wire.Ready):
            order.append(header)
        if isinstance(header, wire.Bye):
            break
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert isinstance(order[-1], wire.Bye)
    answers = order[:-1]
    assert all(isinstance(a, wire.Result) for a in answers), answers
    assert sorted(a.roi_id for a in answers) == sorted(roi_ids)


def test_silent_broker_gets_a_fresh_socket_and_a_new_ready(demo_raw, free_port):
    """Paranoid Pirate: heartbeats keep one connection; silence past the liveness window makes the worker
    close its DEALER, connect a new one with the same identity and announce itself again."""
    raw = copy.deepcopy(demo_raw)
    raw["heartbeat"] = {"interval_s": 0.2, "liveness": 3}  # dead after 0.6 s of silence
    deployment = _deployment(raw, free_port)
    ctx = zmq.Context.instance()
    router = make_socket(ctx, zmq.ROUTER, router_handover=True)
    router.bind(deployment.brokers["broker-1"].endpoint("backend", bind=True))
    monitor = router.get_monitor_socket(zmq.EVENT_ACCEPTED)
    stop = threading.Event()
    settings = WorkerSettings.from_deployment(deployment, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop, None), daemon=True)
    thread.start()
    try:
        identity = _wait_ready(router)
        heartbeat = wire.encode(wire.Heartbeat(sender="broker-1"))
        readies = 0
        end = time.monotonic() + 2.0  # ten liveness windows with heartbeats: no reconnect
        while time.monotonic() < end:
            router.send_multipart([identity, heartbeat])
            while router.poll(100):
                _, header = wire.split_message(router.recv_multipart(), 1)[:2]
                readies += isinstance(header, wire.Ready)
        assert readies >= 5  # one per interval
        assert _accepted(monitor, 0.1) == 1
        reconnects = lambda: REGISTRY.get_sample_value("vcascade_worker_reconnects_total", {"worker": "worker-1"})
        before = reconnects() or 0.0
        time.sleep(1.5)  # silence: at least one reconnect (0.6 s window, then a full window per attempt)
        assert _accepted(monitor, 1.0) >= 1
        assert reconnects() >= before + 1
        got_identity, header = _recv_header(router, 5)
        while not (isinstance(header, wire.Ready) and got_identity == identity):  # same identity, new socket
            got_identity, header = _recv_header(router, 5)  # (what was left in the old pipe may come first,
            # under the generated id ZeroMQ gives a handed-over connection)
    finally:
        stop.set()
        thread.join(timeout=15)
        router.disable_monitor()
        monitor.close()
        router.close()
    assert not thread.is_alive()


def _accepted(monitor: zmq.Socket, timeout_s: float) -> int:
    """Connections the monitored ROUTER accepted since the last call (waits ``timeout_s`` for the first)."""
    from zmq.utils.monitor import recv_monitor_message

    count = 0
    while monitor.poll(int(timeout_s * 1000)):
        event = recv_monitor_message(monitor)
        count += event["event"] == zmq.EVENT_ACCEPTED
        timeout_s = 0.05
    return count

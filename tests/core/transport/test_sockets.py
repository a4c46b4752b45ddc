"""make_socket's options over real tcp: an oversized message is refused by libzmq, the rest keeps working; and
waiting_messages, the one receive loop, over a real inproc pair."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
import zmq
from prometheus_client import REGISTRY
from zmq.utils.monitor import recv_monitor_message

from tests.waiting import until
from vcascade.broker import run_broker
from vcascade.core.schema import BrokerSettings
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment
from vcascade.core.transport.sockets import (
    LINGER_MS, MAX_MESSAGE_BYTES, RECV_BATCH, make_socket, send_frames, waiting_messages,
)

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"
WAIT_S = 20.0  # generous: the CI machine is slow and shared
SILENCE_S = 2.0


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_standard_options(ctx):
    router, dealer = make_socket(ctx, zmq.ROUTER), make_socket(ctx, zmq.DEALER, identity="edge-1")
    assert router.getsockopt(zmq.MAXMSGSIZE) == MAX_MESSAGE_BYTES
    assert router.getsockopt(zmq.LINGER) == LINGER_MS
    assert dealer.getsockopt(zmq.IDENTITY) == b"edge-1"


def _pair(ctx: zmq.Context) -> tuple[zmq.Socket, zmq.Socket]:
    """A PUSH/PULL pair over inproc (delivery is immediate: a sent message is waiting at once)."""
    pull, push = make_socket(ctx, zmq.PULL), make_socket(ctx, zmq.PUSH)
    pull.bind("inproc://waiting-messages")
    push.connect("inproc://waiting-messages")
    return push, pull


def test_waiting_messages_on_an_empty_socket_returns_at_once(ctx):
    _, pull = _pair(ctx)
    assert list(waiting_messages(pull)) == []


def test_waiting_messages_takes_every_waiting_message_in_order_with_all_its_frames(ctx):
    push, pull = _pair(ctx)
    for i in range(5):
        push.send_multipart([b"header-%d" % i, b"payload"])
    assert list(waiting_messages(pull)) == [[b"header-%d" % i, b"payload"] for i in range(5)]
    assert not pull.poll(0)


def test_waiting_messages_without_copy_keeps_every_frame_of_each_message(ctx):
    """copy=False reads each frame's own ``more`` flag: messages of 1, 2 and 3 frames come out whole, in order."""
    push, pull = _pair(ctx)
    sent = [[b"a"], [b"b", b""], [b"c", b"header", bytes(50_000)]]
    for frames in sent:
        push.send_multipart(frames)
    got = list(waiting_messages(pull, copy=False))
    assert [[frame.bytes for frame in frames] for frames in got] == sent
    assert all(isinstance(frame, zmq.Frame) for frames in got for frame in frames)
    assert not pull.poll(0)


def test_send_frames_sends_received_frames_on_whole_and_refuses_a_gone_peer(ctx):
    push, pull = _pair(ctx)
    send_frames(push, [b"only"])
    (received,) = list(waiting_messages(pull, copy=False))
    send_frames(push, [b"head", *received, bytes(70_000)])  # a received zmq.Frame is sent on as it is
    assert [[f.bytes for f in m] for m in waiting_messages(pull, copy=False)] == [[b"head", b"only", bytes(70_000)]]
    router = make_socket(ctx, zmq.ROUTER)  # ROUTER_MANDATORY: a message to an unknown peer raises
    with pytest.raises(zmq.ZMQError) as exc:
        send_frames(router, [b"nobody", b"header"])
    assert exc.value.errno == zmq.EHOSTUNREACH


def test_waiting_messages_is_bounded_and_leaves_the_rest_queued(ctx):
    push, pull = _pair(ctx)
    for i in range(RECV_BATCH + 3):
        push.send(b"%d" % i)
    first = list(waiting_messages(pull))
    assert len(first) == RECV_BATCH and first[-1] == [b"%d" % (RECV_BATCH - 1)]
    assert pull.poll(0), "the socket must stay readable while messages are left"
    assert list(waiting_messages(pull, limit=2)) == [[b"%d" % RECV_BATCH], [b"%d" % (RECV_BATCH + 1)]]
    assert list(waiting_messages(pull)) == [[b"%d" % (RECV_BATCH + 2)]]


def test_waiting_messages_receives_each_message_when_asked(ctx):
    """A generator: the caller handles one message before the next is taken (what it sends meanwhile and
    what arrives meanwhile are seen in order)."""
    push, pull = _pair(ctx)
    push.send(b"first")
    seen = []
    for (frame,) in waiting_messages(pull, copy=False):
        assert isinstance(frame, zmq.Frame)
        seen.append(frame.bytes)
        if len(seen) == 1:
            push.send(b"sent while handling the first")
    assert seen == [b"first", b"sent while handling the first"]


def _wait_event(monitor: zmq.Socket, event: int, timeout_s: float = WAIT_S) -> bool:
    while monitor.poll(int(timeout_s * 1000)):
        if recv_monitor_message(monitor)["event"] == event:
            return True
    return False


def test_oversized_message_disconnects_the_peer_and_the_next_client_is_served(ctx, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    server = make_socket(ctx, zmq.ROUTER)
    monitor = server.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    server.bind(endpoint)
    big = make_socket(ctx, zmq.DEALER, identity="big")
    big.connect(endpoint)

    big.send_multipart([b"header", bytes(MAX_MESSAGE_BYTES + 1)])
    assert _wait_event(monitor, zmq.EVENT_DISCONNECTED), "libzmq did not disconnect the oversized sender"
    assert not server.poll(int(SILENCE_S * 1000)), "an oversized message was delivered"

    good = make_socket(ctx, zmq.DEALER, identity="good")
    good.connect(endpoint)
    good.send_multipart([b"header", bytes(MAX_MESSAGE_BYTES)])  # exactly at the limit: accepted
    assert server.poll(int(WAIT_S * 1000))
    frames = server.recv_multipart()
    assert frames[0] == b"good" and len(frames[2]) == MAX_MESSAGE_BYTES
    monitor.close(linger=0)


def _deployment(name: str, ports: list[int]) -> Deployment:
    raw = yaml.safe_load(DEMO.read_text())
    raw["brokers"] = {name: {"frontend_port": ports[0], "backend_port": ports[1], "metrics_port": ports[2]}}
    for section in ("edges", "workers"):
        for component in raw[section].values():
            component["brokers"] = [name]
    return Deployment.model_validate(raw)


def _roi(roi_id: str) -> bytes:
    return wire.encode(
        wire.Roi(
            roi_id=roi_id, camera="street-1", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
            xyxy=(0.0, 0.0, 8.0, 8.0), crop_xyxy=(0, 0, 8, 8), class_id=0, score=0.9,
        )
    )  # fmt: skip


def _recv_kind(sock: zmq.Socket, kind: type, timeout_s: float = WAIT_S) -> tuple:
    """Next message of ``kind`` (heartbeats and other kinds skipped), as (header, payload frames)."""
    deadline_ms = int(timeout_s * 1000)
    while sock.poll(deadline_ms):
        frames = sock.recv_multipart()
        _, header, payload = wire.split_message(frames, n_routing=0)
        if isinstance(header, kind):
            return header, payload
    raise AssertionError(f"no {kind.__name__} within {timeout_s} s")


def test_broker_keeps_serving_after_an_oversized_roi(ctx, free_port):
    name = "broker-oversize"
    dep = _deployment(name, [free_port(), free_port(), free_port()])
    stop = threading.Event()
    thread = threading.Thread(target=run_broker, args=(BrokerSettings.from_deployment(dep, name), stop), daemon=True)
    thread.start()
    cfg = dep.brokers[name]
    sockets = []

    def dealer(ident: str, side: str) -> zmq.Socket:
        sock = make_socket(ctx, zmq.DEALER, identity=ident)
        sock.connect(cfg.endpoint(side))
        sockets.append(sock)
        return sock

    try:
        flooder = dealer("edge-big", "frontend")
        flooder.send_multipart([_roi("big-1"), bytes(MAX_MESSAGE_BYTES + 1)])
        worker = dealer("worker-a", "backend")
        worker.send(wire.encode(wire.Ready(worker="worker-a", credits=4, recognizer="embed")))
        assert not worker.poll(int(SILENCE_S * 1000), zmq.POLLIN) or _no_roi(worker), "oversized ROI forwarded"

        edge = dealer("edge-good", "frontend")
        edge.send_multipart([_roi("good-1"), b"jpeg bytes"])
        roi, payload = _recv_kind(worker, wire.Roi)
        assert roi.roi_id == "good-1" and payload == [b"jpeg bytes"]
        worker.send(wire.encode(wire.Result(roi_id="good-1", worker="worker-a")))
        result, _ = _recv_kind(edge, wire.Result)
        assert result.roi_id == "good-1"
        def received() -> float | None:
            labels = {"broker": name, "camera": "street-1"}
            return REGISTRY.get_sample_value("vcascade_broker_rois_received_total", labels)

        until(lambda: received() == 1.0)  # the broker publishes its counts at its next housekeeping tick
        assert received() == 1.0  # the oversized ROI never reached the broker's loop
    finally:
        stop.set()
        thread.join(WAIT_S)
        for sock in sockets:
            sock.close(linger=0)
    assert not thread.is_alive()


def _no_roi(worker: zmq.Socket) -> bool:
    """True when everything the worker has received so far is not an ROI (heartbeats are allowed)."""
    while worker.poll(0):
        _, header, _ = wire.split_message(worker.recv_multipart(), n_routing=0)
        if isinstance(header, wire.Roi):
            return False
    return True

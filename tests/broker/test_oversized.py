"""A peer that sends one byte more than the message limit (issue 18, item 5): libzmq cuts its connection and the
message never reaches the broker's loop; the broker counts the cut in ``vcascade_broker_disconnects_total`` and
keeps serving the other peers. Real broker thread, real DEALER sockets (tests/broker/conftest.py)."""

from __future__ import annotations

import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.broker.test_server import answer, make_roi, recv, send_roi
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES, make_socket

pytestmark = pytest.mark.timeout(60)
DISCONNECTS = "vcascade_broker_disconnects_total"


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_one_byte_over_the_limit_is_cut_counted_and_the_broker_keeps_serving(start_broker):
    b = start_broker(worker_timeout_s=60)
    edge, worker = b.edge("e1"), b.worker("w1", credits=4)
    send_roi(edge, "before")  # both peers connected and served before the oversized message
    roi, _ = recv(worker, timeout_s=10)
    answer(worker, roi)
    assert recv(edge, timeout_s=10)[0].roi_id == "before"
    before = b.sample(DISCONNECTS, socket="frontend"), b.sample(DISCONNECTS, socket="backend")

    giant = make_socket(zmq.Context.instance(), zmq.DEALER, identity="giant")
    b.sockets.append(giant)
    giant.connect(b.cfg.endpoint("frontend"))
    giant.send_multipart([wire.encode(make_roi("giant")), b"\0" * (MAX_MESSAGE_BYTES + 1)])
    assert _wait_for(lambda: b.sample(DISCONNECTS, socket="frontend") >= before[0] + 1), "the cut was not counted"
    assert b.sample(DISCONNECTS, socket="backend") == before[1]

    send_roi(edge, "after")  # the other peers' connections were never touched
    roi, _ = recv(worker, timeout_s=10)
    assert roi.roi_id == "after"
    answer(worker, roi)
    assert recv(edge, timeout_s=10)[0].roi_id == "after"
    assert b.counted("vcascade_broker_rois_received_total", 2, camera="cam-1") == 2  # the giant never got in
    assert b.thread.is_alive()


def test_libzmq_reports_the_cut_only_as_a_disconnect():
    """Why the counter counts disconnects: libzmq 4.3 has no event of its own for a message over ZMQ_MAXMSGSIZE (the
    handshake succeeded); if a version adds one, this test fails and the counter can tell the cut apart."""
    ctx = zmq.Context.instance()
    server = make_socket(ctx, zmq.ROUTER)
    server.setsockopt(zmq.MAXMSGSIZE, 1000)
    monitor = server.get_monitor_socket()
    port = server.bind_to_random_port("tcp://127.0.0.1")
    peer = make_socket(ctx, zmq.DEALER)
    try:
        peer.connect(f"tcp://127.0.0.1:{port}")
        peer.send(b"x" * 1001)
        events = []
        while zmq.EVENT_DISCONNECTED not in events:
            assert monitor.poll(10_000), f"no disconnect after the oversized message; events {events}"
            events.append(recv_monitor_message(monitor)["event"])
        cut = [zmq.EVENT_LISTENING, zmq.EVENT_ACCEPTED, zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED]
        assert events == cut  # no handshake failure, no protocol-error event: a plain disconnect
        assert not server.poll(200)  # the message never arrived
    finally:
        server.disable_monitor()
        monitor.close(linger=0)
        peer.close(linger=0)
        server.close(linger=0)

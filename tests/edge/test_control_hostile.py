"""Hostile requests on an edge's control socket (issue 17, cases 1 and 7): a real control server thread and a real
camera set, with this test playing the edge's loop thread; every request gets an answer and is counted."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import zmq
from prometheus_client import REGISTRY

from tests.demo import demo_data
from tests.hostile import deep_header
from vcascade.core.protocol import control
from vcascade.core.config import Deployment
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES, make_socket
from vcascade.edge.camera_set import CameraSet
from vcascade.edge.control import ControlServer
from vcascade.edge.capture.frames import FrameSlots
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack

pytestmark = pytest.mark.timeout(60)
EDGE = "edge-1"


@pytest.fixture
def control_endpoint(free_port):
    """A running control server of edge-1 (no cameras) and a thread applying its requests; yields its endpoint."""
    data = demo_data()
    data["edges"][EDGE]["control_port"] = free_port()
    dep = Deployment.model_validate(data)
    ctx = zmq.Context()
    link = BrokerLink(EdgeSettings.from_deployment(dep, EDGE), ctx, WayBack(OutputLines([])))  # not started: only its books are read (no cameras, all zero)
    cameras = CameraSet(EDGE, FrameSlots(), SimpleNamespace(link=link))  # the edge node's part that list reads
    server = ControlServer(EdgeSettings.from_deployment(dep, EDGE), ctx, cameras)
    server.start()
    stop = threading.Event()
    loop = threading.Thread(target=_apply_until, args=(stop, server))
    loop.start()
    yield dep.edges[EDGE].control_endpoint()
    stop.set()
    loop.join()
    server.close()
    ctx.destroy(linger=0)


def _apply_until(stop: threading.Event, server: ControlServer) -> None:
    """The edge's loop thread, as far as the control socket sees it: apply queued requests every 20 ms."""
    while not stop.wait(0.02):
        server.apply_pending()


def _ask(endpoint: str, body: bytes, timeout_s: float = 10.0) -> control.Reply | None:
    """One request of raw bytes on a fresh REQ socket; its reply, or None when none comes in ``timeout_s``."""
    ctx = zmq.Context.instance()
    sock = make_socket(ctx, zmq.REQ)
    try:
        sock.connect(endpoint)
        sock.send(body)
        return control.decode_reply(sock.recv()) if sock.poll(int(timeout_s * 1000)) else None
    finally:
        sock.close(linger=0)


def _count(op: str, outcome: str) -> float:
    labels = {"edge": EDGE, "op": op, "outcome": outcome}
    return REGISTRY.get_sample_value("vcascade_edge_control_requests_total", labels) or 0.0


def test_a_deeply_nested_request_is_answered_and_camera_list_keeps_answering(control_endpoint):
    """Case 1: after this 5 KB request the control thread died and `camera list` never answered again."""
    before = _count("unknown", "malformed")
    reply = _ask(control_endpoint, deep_header({"op": "camera_list", "v": control.PROTOCOL_VERSION}))
    assert reply is not None and not reply.ok and reply.error.startswith("malformed request")
    assert _count("unknown", "malformed") == before + 1
    listed = _ask(control_endpoint, control.encode(control.CameraList()))
    assert listed is not None and listed.ok and listed.cameras == {}


def test_a_request_of_another_protocol_version_is_refused_and_counted(control_endpoint):
    """Case 7: 50 ``camera_list`` requests with v=999 were answered as if they were version 1."""
    before = _count("unknown", "version"), _count("camera_list", "ok")
    for _ in range(50):
        reply = _ask(control_endpoint, control.encode(control.CameraList(v=999)))
        assert reply is not None and not reply.ok and reply.cameras == {}
        assert "version" in reply.error and f"v={control.PROTOCOL_VERSION}" in reply.error
    assert (_count("unknown", "version"), _count("camera_list", "ok")) == (before[0] + 50, before[1])
    listed = _ask(control_endpoint, control.encode(control.CameraList()))
    assert listed is not None and listed.ok


def test_a_request_one_byte_over_the_message_limit_is_cut_counted_and_list_keeps_answering(control_endpoint):
    """Issue 18: libzmq cut such a client silently; now ``vcascade_edge_disconnects_total{socket=control}`` moves
    (while the client's socket stays open: the count is the cut, not a close)."""
    labels = {"edge": EDGE, "socket": "control"}
    before = REGISTRY.get_sample_value("vcascade_edge_disconnects_total", labels) or 0.0
    giant = make_socket(zmq.Context.instance(), zmq.REQ)
    try:
        giant.connect(control_endpoint)
        giant.send(b"\x81" + b"\0" * MAX_MESSAGE_BYTES)
        deadline = time.monotonic() + 10
        while (REGISTRY.get_sample_value("vcascade_edge_disconnects_total", labels) or 0.0) < before + 1:
            assert time.monotonic() < deadline, "the cut was not counted"
            time.sleep(0.02)
        assert not giant.poll(200)  # never answered: the request did not reach the control thread
    finally:
        giant.close(linger=0)
    listed = _ask(control_endpoint, control.encode(control.CameraList()))
    assert listed is not None and listed.ok

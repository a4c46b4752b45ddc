"""A client of an edge's control socket: one request and its reply, and the wait for a removed camera's books.

The edge is reached at ``edges.EDGE.host:control_port`` of the deployment file. With CurveZMQ on, the client
holds the keypair ``key`` (default: the edge's own, so it works on the edge's host) from
``security.curve.keys_dir`` and pins the edge's public key ``EDGE.key``; the edge admits only the keys of its
authorized folder. Messages are :mod:`vcascade.core.protocol.control`'s.
"""

from __future__ import annotations

import time

import zmq

from vcascade.core.config import Deployment
from vcascade.core.protocol.control import CameraList, Reply, Request, decode_reply, encode
from vcascade.core.transport.security import secure_client
from vcascade.core.transport.sockets import make_socket

POLL_INTERVAL_S = 0.5
"""Period of ``camera list`` requests while :func:`wait_closed` waits for the books to close, s."""
STARTED_POLL_S = 0.2
"""Period of ``camera list`` requests while :func:`wait_started` waits for an added camera's first state, s."""
WORKING_STATES = ("streaming", "ended")
"""First states of an added camera that mean it works: it delivered frames (a short file may already be done)."""
FAULT_STATES = ("failed", "backing_off", "stalled")
"""First states of an added camera that mean it does not work: a file failed, a live source could not be opened
(it backs off and retries) or opened and delivered nothing."""


class ControlUnreachable(ConnectionError):
    """No reply from the edge's control socket in time: the edge is down, the port or host is wrong, or the
    CurveZMQ handshake was refused (a key the edge does not admit). Recovery: check those, then retry."""


def request(dep: Deployment, edge: str, message: Request, key: str | None, timeout_s: float) -> Reply:
    """Send one request to an edge's control socket and return its :class:`vcascade.core.protocol.control.Reply`.

    Args:
        dep: the deployment naming the edge.
        edge: the edge's name (key under ``edges``).
        message: a ``CameraAdd``, ``CameraRemove`` or ``CameraList``.
        key: the CurveZMQ keypair to connect with (None: the edge's own).
        timeout_s: how long to wait for the reply, s.

    Raises:
        ControlUnreachable: no reply within ``timeout_s`` seconds.
        vcascade.core.protocol.bounded_decode.MalformedMessage: the reply does not decode (reason ``version``: an edge
            speaking another control protocol version).
        vcascade.core.transport.security.SecurityError: CurveZMQ is on and a key file is missing.
    """
    ctx = zmq.Context()
    sock = make_socket(ctx, zmq.REQ)
    try:
        secure_client(sock, dep.security, key or edge, edge)
        endpoint = dep.edges[edge].control_endpoint()
        sock.connect(endpoint)
        sock.send(encode(message))
        if not sock.poll(int(timeout_s * 1000)):
            raise ControlUnreachable(f"edge {edge} at {endpoint}: no reply within {timeout_s:.0f} s")
        return decode_reply(sock.recv())
    finally:
        sock.close(linger=0)
        ctx.term()


def wait_closed(
    dep: Deployment, edge: str, camera: str, reply: Reply, key: str | None, timeout_s: float, wait_s: float
) -> Reply:
    """After a removal's ``reply``, list the edge's cameras every :data:`POLL_INTERVAL_S` until ``camera``'s
    books are closed (``removal == "closed"``: every ROI it sent has a result or a drop) or ``wait_s`` seconds
    have passed; returns the last reply. Raises what :func:`request` raises."""
    deadline = time.monotonic() + wait_s
    while (reply.cameras.get(camera) or {}).get("removal") != "closed" and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S)
        reply = request(dep, edge, CameraList(), key, timeout_s)
    return reply


def wait_started(
    dep: Deployment, edge: str, camera: str, reply: Reply, key: str | None, timeout_s: float, wait_s: float
) -> Reply:
    """After an addition's ``reply``, list the edge's cameras every :data:`STARTED_POLL_S` until ``camera`` has
    left ``connecting`` for its first real state (one of :data:`WORKING_STATES` or :data:`FAULT_STATES`) or
    ``wait_s`` seconds have passed; returns the last reply. Raises what :func:`request` raises."""
    deadline = time.monotonic() + wait_s
    while first_state(reply, camera) is None and time.monotonic() < deadline:
        time.sleep(STARTED_POLL_S)
        reply = request(dep, edge, CameraList(), key, timeout_s)
    return reply


def first_state(reply: Reply, camera: str) -> str | None:
    """``camera``'s state in ``reply`` once it is a real one (working or a fault); None while it connects."""
    state = (reply.cameras.get(camera) or {}).get("state")
    return state if state in WORKING_STATES + FAULT_STATES else None

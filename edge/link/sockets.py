"""The edge's sockets to its brokers: one DEALER per broker, with a monitor that reports lost connections.

``ZMQ_IMMEDIATE`` makes a send fail at once (``zmq.Again``) while the broker is not connected, instead of
queueing the ROI into a pipe to a peer that may never come back. Messages already in a pipe when the broker
dies are lost with the connection; the monitor's ``EVENT_DISCONNECTED`` lets the link retry them at once
(a killed broker's kernel closes its TCP connections), and the liveness window and ``roi_timeout_s`` cover
the cases the connection does not show (a hung broker, a silent network). Reconnection is ZeroMQ's own.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import parse_monitor_message

from vcascade.core.config import SecurityConfig
from vcascade.core.transport.security import FAILURE_REASONS, secure_client
from vcascade.core.transport.sockets import make_socket, waiting_messages
from vcascade.edge.metrics import EdgeTelemetry

RECONNECT_IVL_MS, RECONNECT_IVL_MAX_MS = 100, 1000
"""ZeroMQ reconnect back-off to a broker that went away: 0.1 s doubling up to 1 s, so that a restarted broker
is reached within about a second without hammering a dead address."""


def broker_socket(
    ctx: zmq.Context, identity: str, endpoint: str, security: SecurityConfig, edge: str, broker: str
) -> tuple[zmq.Socket, zmq.Socket]:
    """A DEALER connected to one broker's frontend, and its monitor socket (lost connections and, with
    CurveZMQ, refused handshakes).

    With ``security.curve.enabled`` the DEALER is a CurveZMQ client holding ``edge``'s keypair and pinning
    ``broker``'s public key (:func:`vcascade.core.transport.security.secure_client`).
    Both belong to the calling thread; close the monitor with :func:`close_broker_socket`.

    Raises:
        vcascade.core.transport.security.SecurityError: a key file is missing or malformed.
    """
    sock = make_socket(ctx, zmq.DEALER, identity=identity)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    secure_client(sock, security, edge, broker)  # no-op when curve is disabled
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | sum(FAILURE_REASONS))
    sock.connect(endpoint)
    return sock, monitor


def disconnected(monitor: zmq.Socket, telemetry: EdgeTelemetry) -> bool:
    """Read the pending monitor events without blocking (``RECV_BATCH`` at most); count refused CurveZMQ
    handshakes in ``vcascade_edge_auth_failures_total{edge, reason}``. Returns True if a connection was lost."""
    lost = False
    for frames in waiting_messages(monitor):
        event = parse_monitor_message(frames)
        if event["event"] in FAILURE_REASONS:
            telemetry.auth_failed(FAILURE_REASONS[event["event"]])
        lost = lost or event["event"] == zmq.EVENT_DISCONNECTED
    return lost


def close_broker_socket(sock: zmq.Socket, monitor: zmq.Socket) -> None:
    """Stop monitoring and close both sockets (the DEALER lingers ``LINGER_MS`` at most)."""
    try:
        sock.disable_monitor()
    except zmq.ZMQError:  # already stopped
        pass
    monitor.close(linger=0)
    sock.close()

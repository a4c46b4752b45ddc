"""The broker's two ROUTER sockets, made secure (CurveZMQ when enabled) and watched for refused handshakes."""

from __future__ import annotations

import zmq

from vcascade.core.config import Deployment
from vcascade.core.security import secure_server, watch_auth_failures
from vcascade.core.sockets import make_socket


def broker_sockets(ctx: zmq.Context, deployment: Deployment, name: str) -> tuple[zmq.Socket, zmq.Socket]:
    """``(frontend, backend)``: ROUTERs with ``ROUTER_HANDOVER`` (a reconnecting identity takes over at once), set
    up as CurveZMQ servers of broker ``name`` when ``security.curve.enabled`` (refused handshakes are counted
    from the socket monitor, ``vcascade_broker_auth_failures_total``). Not bound yet; the caller closes them."""
    frontend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    backend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    for sock in (frontend, backend):
        secure_server(sock, deployment.security, name)  # no-op when curve is disabled
        if deployment.security.curve.enabled:
            watch_auth_failures(sock, "broker", name)  # refused handshakes never reach the loop: count them here
    return frontend, backend

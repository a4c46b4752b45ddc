"""The broker's two ROUTER sockets, made secure (CurveZMQ when enabled), given their roles and watched for
refused handshakes and lost connections."""

from __future__ import annotations

import zmq

from vcascade.core.config import Deployment
from vcascade.core.transport.disconnects import watch_connections
from vcascade.core.transport.security import secure_server
from vcascade.core.transport.sockets import make_socket
from vcascade.core.transport.zap import EDGES, WORKERS, RoleAuthenticator, admitted_names


def broker_sockets(
    ctx: zmq.Context, deployment: Deployment, name: str, auth: RoleAuthenticator | None
) -> tuple[zmq.Socket, zmq.Socket]:
    """``(frontend, backend)``: ROUTERs with ``ROUTER_HANDOVER`` (a reconnecting identity takes over at once), set
    up as CurveZMQ servers of broker ``name`` when ``security.curve.enabled``: the frontend admits only the keys of
    the broker's edges, the backend only those of its workers (``auth``, the process's ZAP handler, from
    :func:`vcascade.core.transport.zap.start_authenticator`; None when curve is disabled). Refused handshakes are counted
    from the socket monitor, ``vcascade_broker_auth_failures_total{reason}`` (``wrong_role``: a key of the
    authorized folder on the other socket's role), and so are lost connections, among them peers libzmq cut for a
    message over the size limit, ``vcascade_broker_disconnects_total{socket}`` (:mod:`vcascade.core.transport.disconnects`).
    Not bound yet; the caller closes them."""
    frontend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    backend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    roles = admitted_names(deployment, name)
    for sock, role, side in ((frontend, EDGES, "frontend"), (backend, WORKERS, "backend")):
        secure_server(sock, deployment.security, name)  # no-op when curve is disabled
        refusals = None if auth is None else auth.admit(sock, role, roles[role]).refusal_reason
        watch_connections(sock, "broker", name, side, curve=auth is not None, refusals=refusals)  # never in the loop
    return frontend, backend

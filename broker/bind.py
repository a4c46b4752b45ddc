"""The broker's two ROUTER sockets, made secure (CurveZMQ when enabled), given their roles and watched for
refused handshakes and lost connections."""

from __future__ import annotations

import zmq

from vcascade.core.schema.broker_settings import BrokerSettings
from vcascade.core.transport.disconnects import watch_connections
from vcascade.core.transport.security import secure_server
from vcascade.core.transport.sockets import make_socket
from vcascade.core.transport.zap import EDGES, WORKERS, RoleAuthenticator


def broker_sockets(
    ctx: zmq.Context, settings: BrokerSettings, auth: RoleAuthenticator | None
) -> tuple[zmq.Socket, zmq.Socket]:
    """``(frontend, backend)``: ROUTERs with ``ROUTER_HANDOVER`` (a reconnecting identity takes over at once), set
    up as CurveZMQ servers of the broker ``settings`` describe when ``security.curve.enabled``: the frontend admits
    only the keys of the broker's edges, the backend only those of its workers (``auth``, the process's ZAP handler, from
    :func:`vcascade.core.transport.zap.start_authenticator`; None when curve is disabled). Refused handshakes are counted
    from the socket monitor, ``vcascade_broker_auth_failures_total{reason}`` (``wrong_role``: a key of the
    authorized folder on the other socket's role), and so are lost connections, among them peers libzmq cut for a
    message over the size limit, ``vcascade_broker_disconnects_total{socket}`` (:mod:`vcascade.core.transport.disconnects`).
    Not bound yet; the caller closes them."""
    frontend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    backend = make_socket(ctx, zmq.ROUTER, router_handover=True)
    roles = {EDGES: list(settings.edges), WORKERS: list(settings.workers)}
    for sock, role, side in ((frontend, EDGES, "frontend"), (backend, WORKERS, "backend")):
        secure_server(sock, settings.security, settings.name)  # no-op when curve is disabled
        refusals = None if auth is None else auth.admit(sock, role, roles[role]).refusal_reason
        watch_connections(sock, "broker", settings.name, side, curve=auth is not None, refusals=refusals)  # never in the loop
    return frontend, backend

"""Thin ZeroMQ layer: socket options every vcascade socket needs, so none is set ad hoc.

* ``LINGER`` bounded: closing a socket with unsent messages never hangs a shutdown.
* ``ROUTER_MANDATORY`` on ROUTER sockets: a message to an unknown or gone peer raises
  ``zmq.ZMQError(EHOSTUNREACH)`` instead of vanishing, so the caller can count the drop.
* ``MAXMSGSIZE``: a peer cannot make us allocate an arbitrarily large message.
* High-water marks are explicit; the application queues above them are what bound memory.
"""

from __future__ import annotations

import zmq

LINGER_MS = 500
"""How long a closing socket may still try to deliver queued messages, ms."""

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest accepted ZeroMQ message part, bytes (a 4K BGR crop is 25 MB raw; JPEG crops are far smaller)."""

HWM = 10_000
"""Send/receive high-water mark, messages per peer."""


def make_socket(
    ctx: zmq.Context, kind: int, identity: str | None = None, *, router_handover: bool = False
) -> zmq.Socket:
    """Create a socket with vcascade's standard options.

    Args:
        ctx: the process's single ``zmq.Context``.
        kind: ``zmq.ROUTER``, ``zmq.DEALER``, ``zmq.PUB``, ...
        identity: routing id for DEALER sockets (the peer name, so brokers can log it).
        router_handover: ROUTER only: a new connection with an identity already connected takes that identity
            over (``ZMQ_ROUTER_HANDOVER``), so a peer that reconnects after a silent link (Paranoid Pirate)
            is reachable at once instead of being refused until the old connection times out.
    """
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if router_handover:
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity.encode())
    return sock

"""Connections a component's sockets lose, counted from the socket monitor, and why it matters: libzmq cuts a peer
that sends a message part larger than ``MAX_MESSAGE_BYTES`` without telling the application.

Every vcascade socket sets ``ZMQ_MAXMSGSIZE`` (:data:`vcascade.core.transport.sockets.MAX_MESSAGE_BYTES`), so a peer cannot
make a process allocate an arbitrarily large message. libzmq enforces it in its decoder: a frame header announcing
one byte more is a protocol error, the connection is closed and the message never reaches the socket loop. libzmq
4.3 reports that only as ``EVENT_DISCONNECTED``, the same event as a peer that closes its socket, crashes or loses
its network (no handshake-failure event: the handshake succeeded; checked in tests/broker/test_oversized.py). So
``vcascade_<component>_disconnects_total{<component>, socket}`` counts every connection a socket lost; a count
that grows while no peer restarts (a DEALER reconnects at once after the cut and sends again) is a peer sending
oversized or corrupt messages. On an edge's control socket every ``vcascade camera`` command ends with one
disconnect (one connection per request), so there the cuts are the disconnects beyond
``vcascade_edge_control_requests_total``. The first disconnect of a socket is logged at INFO, the rest at DEBUG:
most are peers leaving, and the metric is the record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import zmq
from prometheus_client import Counter

from vcascade.core.transport.security import watch_auth_failures
from vcascade.core.transport.monitor import EventHandler, SocketMonitor, event_counter

log = logging.getLogger(__name__)

def disconnects_counter(component: str) -> Counter:
    """``vcascade_<component>_disconnects_total{<component>, socket}``, declared once per process."""
    return event_counter(
        component, "disconnects",
        "Connections this socket lost: a peer that closed, crashed or went away, or one libzmq cut for a protocol "
        "error such as a message larger than the limit (ZMQ_MAXMSGSIZE; libzmq reports both alike).",
        "socket",
    )


class DisconnectCounter:
    """Counts one socket's lost connections (``EVENT_DISCONNECTED``) in :func:`disconnects_counter`.

    Args:
        component: ``broker``, ``edge``, ``worker`` or ``stage_group`` (metric name and label key).
        name: the component's name (label value).
        socket: which of its sockets (label value): ``frontend``, ``backend``, ``control``, ...
    """

    def __init__(self, component: str, name: str, socket: str) -> None:
        self.component, self.name, self.socket = component, name, socket
        self.total = 0
        """Connections lost so far (written by the monitor's thread only)."""
        self._metric = disconnects_counter(component).labels(name, socket)

    def handlers(self) -> dict[int, EventHandler]:
        """The monitor handlers of this counter: ``{zmq.EVENT_DISCONNECTED: ...}``."""
        return {zmq.EVENT_DISCONNECTED: self._on_disconnect}

    def _on_disconnect(self, event: int, fd: int) -> None:
        self.total += 1
        self._metric.inc()
        level = logging.INFO if self.total == 1 else logging.DEBUG  # most are peers leaving: the metric tells
        log.log(level, "%s %s: a peer's connection to the %s socket was lost (closed by the peer, or cut by libzmq "
                "for a protocol error such as a message over the size limit)", self.component, self.name, self.socket)


def watch_connections(
    sock: zmq.Socket, component: str, name: str, socket: str, *, curve: bool,
    refusals: Callable[[], str] | None = None,
) -> DisconnectCounter:  # fmt: skip
    """Count ``sock``'s lost connections and, with ``curve`` (CurveZMQ on), its refused handshakes on the same
    monitor (libzmq keeps one per socket). Call in the socket's owning thread, before bind/connect.

    Args:
        sock, component, name, socket: see :class:`DisconnectCounter`.
        curve: True when the socket is a CurveZMQ server or client (its handshakes can be refused).
        refusals: with ``curve``, the socket's gate's :meth:`vcascade.core.transport.zap.RoleGate.refusal_reason`, or None
            (see :class:`vcascade.core.transport.security.AuthFailureMonitor`).
    """
    lost = DisconnectCounter(component, name, socket)
    if curve:
        watch_auth_failures(sock, component, name, refusals, also=lost.handlers())
    else:
        SocketMonitor(sock, f"monitor-{name}-{socket}", lost.handlers())
    return lost

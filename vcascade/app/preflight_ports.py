"""The TCP ports a deployment binds on this host, checked before anything starts: a port taken is named by its
config key and the process holding it (``vcascade run`` refuses to start; ``vcascade check --deep`` lists it).

Without this check a component whose port is taken fails when it binds, after the others have started, and the
launcher restarts it until it gives up (issue 27: the broker restarted five times, with a traceback each time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

from vcascade.core.config import Deployment
from vcascade.core.schema.checks import bound_ports
from vcascade.core.transport.ports import bind_error

_TCP_ENDPOINT = re.compile(r"^tcp://[^/]*:(\d+)$")


class PortsTaken(RuntimeError):
    """Ports of the deployment cannot be bound on this host; the message has one line per port
    (:meth:`PortTaken.line`)."""


@dataclass(frozen=True)
class PortTaken:
    """One port of the file that cannot be bound now.

    key: the config key path (``brokers.broker-1.metrics_port``); port: the TCP port; error: the system's reason
    (``Address already in use``); holder: the listening process (``pid 123 (python3)``), or None when
    this host does not show it (another user's process without the rights to see it, another network namespace).
    """

    key: str
    port: int
    error: str
    holder: str | None

    def line(self) -> str:
        """``key = port: cannot bind it on this host: error (held by pid N (command)); ...`` on one line."""
        held = f" (held by {self.holder})" if self.holder else ""
        return (f"{self.key} = {self.port}: cannot bind it on this host: {self.error}{held}; change {self.key} or "
                "stop that process")


def deployment_ports(dep: Deployment) -> Iterator[tuple[str, int]]:
    """(key, port) of every TCP port the file's processes bind on this host under ``vcascade run``: metrics,
    control, preview, broker frontend and backend, stage group, live view (:func:`vcascade.core.schema.checks.
    bound_ports`) and each edge's ``zmq_pub`` sink bound on a ``tcp://`` endpoint."""
    yield from bound_ports(dep)
    for name, edge in dep.edges.items():
        for i, sink in enumerate(edge.sinks):
            match = _TCP_ENDPOINT.match(getattr(sink, "endpoint", "") if sink.type == "zmq_pub" else "")
            if match:
                yield f"edges.{name}.sinks[{i}].endpoint", int(match.group(1))


def taken_ports(dep: Deployment) -> list[PortTaken]:
    """Every port of :func:`deployment_ports` that cannot be bound now, bound as the components bind it
    (``SO_REUSEADDR``: connections in TIME-WAIT do not count), with the process listening on it."""
    taken = []
    for key, port in deployment_ports(dep):
        error = bind_error(port, reuse_address=True)
        if error is not None:
            taken.append(PortTaken(key, port, error, port_holder(port)))
    return taken


def port_holder(port: int) -> str | None:
    """``pid N (name)`` of the process listening on TCP ``port`` on this host (psutil), or None when it is not
    visible. The process name only: its command line may hold secrets (passwords in arguments)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return f"pid {conn.pid}"
    return None


def check_ports(dep: Deployment) -> None:
    """Raise :class:`PortsTaken` (one line per port) when a port of the deployment cannot be bound on this host."""
    taken = taken_ports(dep)
    if taken:
        raise PortsTaken("\n".join(t.line() for t in taken))

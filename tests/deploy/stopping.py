"""How long each component may take from SIGTERM to exit, for the container and Kubernetes checks: a stop
timeout shorter than that (``terminationGracePeriodSeconds``, compose's ``stop_grace_period``) SIGKILLs a
component that is still draining, and its in-flight ROIs are lost uncounted (docs/RELIABILITY.md, "Stopping")."""

from __future__ import annotations

from vcascade.broker.server import DRAIN_TIMEOUT_S as BROKER_DRAIN_TIMEOUT_S
from vcascade.center.worker import DRAIN_TIMEOUT_S as WORKER_DRAIN_TIMEOUT_S
from vcascade.core.config import Deployment

EXIT_MARGIN_S = 5.0
"""Beyond the drain: closing sockets and sinks, joining threads, the interpreter's exit."""


def drain_bound_s(dep: Deployment, kind: str, name: str) -> float:
    """Seconds component ``kind`` ``name`` of ``dep`` may take from SIGTERM to exit.

    Edge: its ``drain_timeout_s`` for in-flight ROIs. Broker: its drain of in-flight ROIs
    (vcascade.broker.server.DRAIN_TIMEOUT_S). Worker: its inbox taking the stop, then its micro-batches in
    flight, each bounded by vcascade.center.worker.DRAIN_TIMEOUT_S. Plus EXIT_MARGIN_S.

    Raises:
        KeyError: no such component in ``dep``.
    """
    sections = {"edge": dep.edges, "broker": dep.brokers, "worker": dep.workers}
    component = sections[kind][name]
    if kind == "edge":
        return component.drain_timeout_s + EXIT_MARGIN_S
    return (BROKER_DRAIN_TIMEOUT_S if kind == "broker" else 2 * WORKER_DRAIN_TIMEOUT_S) + EXIT_MARGIN_S

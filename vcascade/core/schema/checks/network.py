"""Cross-section checks of what the file's processes bind: distinct ports, no plaintext ZeroMQ off loopback
unless the file says so, no preview endpoint off loopback without ``ui.token``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from vcascade.core.schema.broker import BrokerConfig
from vcascade.core.schema.center import StageGroupConfig
from vcascade.core.schema.deployment import Deployment
from vcascade.core.schema.edge import EdgeConfig
from vcascade.core.schema.ui import is_loopback

# ---------------------------------------------------------------- ports and security


def bound_ports(dep: Deployment) -> Iterator[tuple[str, int]]:
    """(key, port) of every TCP port the file's processes bind, in file order."""
    for name, edge in dep.edges.items():
        yield f"edges.{name}.metrics_port", edge.metrics_port
        if edge.control_port is not None:
            yield f"edges.{name}.control_port", edge.control_port
        if edge.preview_port is not None:
            yield f"edges.{name}.preview_port", edge.preview_port
    for name, broker in dep.brokers.items():
        yield f"brokers.{name}.metrics_port", broker.metrics_port
        yield f"brokers.{name}.frontend_port", broker.frontend_port
        yield f"brokers.{name}.backend_port", broker.backend_port
    for name, worker in dep.workers.items():
        yield f"workers.{name}.metrics_port", worker.metrics_port
    for name, group in dep.stage_groups.items():
        yield f"stage_groups.{name}.metrics_port", group.metrics_port
        yield f"stage_groups.{name}.port", group.port
    if dep.ui.enabled:  # `vcascade run` serves the view on this host
        yield "ui.port", dep.ui.port


def check_ports(dep: Deployment) -> list[str]:
    """Every TCP port the file's processes bind must be distinct (`vcascade run` puts them on one host)."""
    seen: dict[int, str] = {}
    problems = []
    for key, port in bound_ports(dep):
        other = seen.setdefault(port, key)
        if other != key:
            problems.append(f"{key} = {port}: expected a port not already used by {other}")
    return problems


_LOOPBACK_REASON = (
    "expected a loopback address while security.curve.enabled is false (enable CurveZMQ, or set "
    "security.allow_plaintext_remote: true on a trusted network)"
)


def check_security(dep: Deployment) -> list[str]:
    """A broker, control socket or stage group reachable from other hosts must not speak plaintext unless the
    file says so explicitly."""
    if dep.security.curve.enabled or dep.security.allow_plaintext_remote:
        return []
    controlled = {name: edge for name, edge in dep.edges.items() if edge.control_port is not None}
    control_reason = (
        "expected a loopback address for the control socket while security.curve.enabled is false (enable "
        "CurveZMQ, or set security.allow_plaintext_remote: true)"
    )
    return [
        *_check_loopback("brokers", dep.brokers, _LOOPBACK_REASON),
        *_check_loopback("edges", controlled, control_reason),
        *_check_loopback("stage_groups", dep.stage_groups, _LOOPBACK_REASON),
        *_check_pub_sinks(dep),
    ]


def _check_pub_sinks(dep: Deployment) -> list[str]:
    """ZeroMQ PUB sinks bound to a non-loopback tcp address (``*``, an interface, another host's address): any
    host could subscribe to every result in plaintext."""
    problems = []
    for name, edge in dep.edges.items():
        for index, sink in enumerate(edge.sinks):
            if sink.type != "zmq_pub" or not sink.endpoint.startswith("tcp://"):
                continue
            host = sink.endpoint.removeprefix("tcp://").rpartition(":")[0]
            if not is_loopback(host):
                problems.append(
                    f"edges.{name}.sinks[{index}].endpoint = {sink.endpoint!r}: expected a loopback address while "
                    "security.curve.enabled is false (enable CurveZMQ, or set security.allow_plaintext_remote: true "
                    "on a trusted network)"
                )
    return problems


def _check_loopback(
    section: str, processes: Mapping[str, BrokerConfig | EdgeConfig | StageGroupConfig], reason: str
) -> list[str]:
    """Processes of one section whose bound address (``bind``, else ``host``) is not a loopback address."""
    problems = []
    for name, process in processes.items():
        address = process.bind or process.host
        if not is_loopback(address):
            problems.append(f"{section}.{name}.{'bind' if process.bind else 'host'} = {address!r}: {reason}")
    return problems


def check_previews(dep: Deployment) -> list[str]:
    """An edge preview endpoint bound to a non-loopback address without ``ui.token`` (one message per edge)."""
    if dep.ui.token is not None:
        return []
    problems = []
    for name, edge in dep.edges.items():
        address = edge.bind or edge.host
        if edge.preview_port is not None and not is_loopback(address):
            key = "bind" if edge.bind else "host"
            problems.append(
                f"edges.{name}.{key} = {address!r}: the preview endpoint (preview_port) on a non-loopback address "
                "needs ui.token (e.g. token: ${VCASCADE_UI_TOKEN})"
            )
    return problems

"""The ZAP handler of a process: which authorized client keys each CurveZMQ server socket admits (roles).

ZAP (ZeroMQ RFC 27, http://rfc.zeromq.org/spec/27) lets a server socket ask a handler in its own context
whether a client's public key may connect; the socket's ``ZAP_DOMAIN`` tells the handler which socket asks.
:func:`start_authenticator` starts one handler per context holding every public key of the authorized
folder (``authorized_dir``, else ``keys_dir``), each under its component name (the file name ``NAME.key``).
:meth:`RoleAuthenticator.admit` then gives each server socket its own domain and the names it admits, taken
from the deployment file by :func:`admitted_names`:

=====================  ==============================================================================
socket                 admits the keys named
=====================  ==============================================================================
broker frontend        the edges that list the broker under ``brokers``
broker backend         the workers that list the broker under ``brokers``
stage group            the workers whose ``downstream`` is the group
edge control socket    the edge itself and every key that is no component of the deployment (operators)
=====================  ==============================================================================

So the deployment file is the roles file: ``vcascade keys generate DIR --config FILE`` names each key after
its component, and an edge's key presented on a broker's backend is refused. A key of the authorized folder
refused because this socket does not admit its name is a ``wrong_role`` refusal; a key not in the folder at
all is ``unauthorized``. libzmq reports both as the same handshake failure (ZAP status 400), so the gate of
the socket queues the reason before the ZAP reply leaves, and the socket's
:class:`vcascade.core.transport.security.AuthFailureMonitor` takes it from there (:meth:`RoleGate.refusal_reason`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable

import zmq
from zmq.auth.thread import ThreadAuthenticator

from vcascade.core.config import Deployment, SecurityConfig
from vcascade.core.transport.security import PUBLIC_SUFFIX, SecurityError, authorized_dir, load_authorized

log = logging.getLogger(__name__)

EDGES, WORKERS, OPERATORS = "edges", "workers", "operators"
"""Role names, also the ZAP domains of the sockets that admit them (one socket per role and process)."""


def admitted_names(deployment: Deployment, name: str) -> dict[str, list[str]]:
    """Per role, the client names server component ``name`` admits by the deployment file (module table).

    For an edge, ``operators`` holds only the edge itself; the socket also admits every authorized key that
    is no component of the deployment (see :meth:`RoleAuthenticator.admit`). Empty for a worker.

    Raises:
        KeyError: ``name`` is no broker, stage group, edge or worker of the deployment.
    """
    if name in deployment.brokers:
        return {
            EDGES: [edge for edge, cfg in deployment.edges.items() if name in cfg.brokers],
            WORKERS: [worker for worker, cfg in deployment.workers.items() if name in cfg.brokers],
        }
    if name in deployment.stage_groups:
        return {WORKERS: [worker for worker, cfg in deployment.workers.items() if cfg.downstream == name]}
    if name in deployment.edges:
        return {OPERATORS: [name]}
    if name in deployment.workers:
        return {}
    raise KeyError(f"{name!r} is no broker, stage group, edge or worker of the deployment")


class RoleGate:
    """The ZAP credentials provider of one server socket: admits the public keys of the given names only.

    ``callback`` runs in the authenticator's thread; :meth:`refusal_reason` in the socket monitor's thread
    (a deque: one appender, one taker, both atomic in CPython).

    Args:
        domain: the socket's ZAP domain.
        admitted: Z85 public keys (40 bytes) this socket admits.
        authorized: every Z85 public key of the authorized folder (refusals of these are ``wrong_role``).
    """

    def __init__(self, domain: str, admitted: set[bytes], authorized: set[bytes]) -> None:
        self.domain = domain
        self._admitted, self._authorized = frozenset(admitted), frozenset(authorized)
        self._refusals: deque[str] = deque(maxlen=1024)  # a monitor that stopped must not let it grow

    def callback(self, domain: str, client_key: bytes) -> bool:
        """pyzmq's credentials-provider hook: True admits ``client_key`` (Z85) on ``domain``."""
        if domain == self.domain and client_key in self._admitted:
            return True
        self._refusals.append("wrong_role" if client_key in self._authorized else "unauthorized")
        return False

    def refusal_reason(self) -> str:
        """The reason of the oldest refusal not yet taken (``unauthorized`` when none is queued)."""
        try:
            return self._refusals.popleft()
        except IndexError:
            return "unauthorized"


class RoleAuthenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler thread, admitting per socket (ZAP domain) the keys of that socket's role.

    Args:
        ctx: the context whose sockets it serves (one handler per context).
        keys: the authorized public keys, Z85, by component name (:func:`load_authorized`).
    """

    def __init__(self, ctx: zmq.Context, keys: dict[str, bytes]) -> None:
        super().__init__(ctx, log=logging.getLogger(f"{__name__}.handler"))
        self.keys = keys

    def admit(
        self, sock: zmq.Socket, role: str, names: Iterable[str], *, components: Iterable[str] | None = None
    ) -> RoleGate:
        """Set ``sock``'s ZAP domain to ``role`` and admit there the authorized keys named ``names``. Call before
        ``bind``.

        Args:
            sock: a CURVE server socket (:func:`vcascade.core.transport.security.secure_server`).
            role: the ZAP domain, one per socket of the context (``edges``, ``workers``, ``operators``).
            names: component names whose ``NAME.key`` this socket admits (absent files are logged, not raised).
            components: also admit every authorized key that is none of these component names (the operators;
                :func:`vcascade.core.transport.keys.component_names` of the deployment).

        Returns:
            The socket's gate; its :meth:`RoleGate.refusal_reason` feeds the socket's auth-failure monitor.

        Raises:
            ValueError: another socket of this context already has domain ``role``.
        """
        if role in self.credentials_providers:
            raise ValueError(f"ZAP domain {role!r} is already admitted on another socket of this context")
        wanted = set(names)
        if components is not None:
            wanted |= set(self.keys) - set(components)  # operators: no component's name
        missing = sorted(n for n in wanted if n not in self.keys)
        if missing:
            log.warning("CurveZMQ %s: no key file in the authorized folder for %s: they will be refused",
                        role, ", ".join(missing))
        gate = RoleGate(role, {self.keys[n] for n in wanted if n in self.keys}, set(self.keys.values()))
        self.configure_curve_callback(domain=role, credentials_provider=gate)
        sock.zap_domain = role.encode()
        log.info("CurveZMQ %s: admits %s", role, ", ".join(sorted(set(wanted) - set(missing))) or "nobody")
        return gate


def start_authenticator(ctx: zmq.Context, security: SecurityConfig) -> RoleAuthenticator | None:
    """Start the ZAP handler of this process's context with the public keys of the authorized folder.

    One per process (ZAP is per context), started before any CURVE server socket binds; each server socket
    then gets its role with :meth:`RoleAuthenticator.admit` (a socket without one admits nobody: pyzmq
    answers "Unknown domain"). Stop it with ``.stop()`` after closing those sockets. Returns None when
    CurveZMQ is disabled. The folder is read once: restart to admit a new key.

    Raises:
        SecurityError: the authorized folder is missing, empty or holds a malformed key.
    """
    if not security.curve.enabled:
        return None
    keys = load_authorized(security)
    auth = RoleAuthenticator(ctx, keys)
    auth.start()
    log.info("CurveZMQ: %d authorized client keys from %s", len(keys), authorized_dir(security))
    return auth


def check_roles(deployment: Deployment, name: str) -> dict[str, list[str]]:
    """The clients each server socket of broker or stage group ``name`` admits, every one checked to have its
    ``NAME.key`` in the authorized folder (what ``vcascade keys check`` verifies); empty for an edge or worker,
    and when CurveZMQ is disabled.

    Raises:
        SecurityError: the authorized folder is missing, empty or malformed, or lacks a client's ``NAME.key``
            (that client would be refused with ``unauthorized``).
    """
    security = deployment.security
    if not security.curve.enabled or (name not in deployment.brokers and name not in deployment.stage_groups):
        return {}
    keys = load_authorized(security)
    roles = admitted_names(deployment, name)
    for role, names in roles.items():
        for client in names:
            if client not in keys:
                raise SecurityError(f"{authorized_dir(security) / (client + PUBLIC_SUFFIX)}: missing; {name} would "
                                    f"refuse {client} on its {role} socket (copy {client}{PUBLIC_SUFFIX} there)")
    return roles

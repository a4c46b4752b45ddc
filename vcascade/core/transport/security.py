"""CurveZMQ on the broker links: key files, server/client socket setup, refused-handshake counting.

CurveZMQ (RFC 26, http://rfc.zeromq.org/spec/26) encrypts every frame and authenticates both ends with
Curve25519 keypairs. A broker's sockets are *servers*: they hold the broker's secret key, and the ZAP handler
of :mod:`vcascade.core.transport.zap` admits on each of them only the clients of its role whose public key is in
``authorized_dir`` (edges on the frontend, workers on the backend). Edges and workers are *clients*: they hold
their own keypair and the broker's public key, so they also know they talk to the real broker.

Key files are ZeroMQ certificates written by :func:`zmq.auth.create_certificates` (``vcascade keys
generate``): ``NAME.key`` (public key only) and ``NAME.key_secret`` (public and secret key, mode 0600); the
file name is the component's name, which gives the key its role.

Refused handshakes never reach the application: libzmq closes the connection. They are counted by
:class:`AuthFailureMonitor` in ``vcascade_<component>_auth_failures_total{<component>, reason}`` with
``reason`` one of ``wrong_role`` (an authorized key, of a component this socket does not admit),
``unauthorized`` (ZAP refused an unknown key), ``protocol`` (no CURVE, wrong server key, garbage) or
``no_detail``.

With ``security.curve.enabled: false`` every function here is a no-op and links are plain tcp.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
import zmq.utils.z85
from prometheus_client import Counter

from vcascade.core.config import Deployment, SecurityConfig
from vcascade.core.transport.monitor import EventHandler, SocketMonitor, event_counter

log = logging.getLogger(__name__)

PUBLIC_SUFFIX, SECRET_SUFFIX = ".key", ".key_secret"
"""File name suffixes of :func:`zmq.auth.create_certificates`."""

Z85_KEY_CHARS = 40
"""Length of a Z85-encoded 32-byte Curve25519 key (ZeroMQ RFC 32: 5 characters per 4 bytes)."""

CURVE_OVERHEAD_BYTES = 33
"""Bytes a CURVE MESSAGE command adds to each frame: ``\\x07MESSAGE`` (8), nonce (8), box MAC (16), flags (1)
(RFC 26, "The MESSAGE Command"). libzmq applies ``MAXMSGSIZE`` to the encrypted frame, so over CurveZMQ the
largest deliverable part is ``MAX_MESSAGE_BYTES - CURVE_OVERHEAD_BYTES`` (checked in test_security.py)."""

FAILURE_REASONS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "unauthorized",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "no_detail",
}
"""Socket monitor events counted as refused handshakes, and their ``reason`` label."""


class SecurityError(Exception):
    """A key file or key folder is missing, unreadable or malformed; the message names the path.

    Recovery: none at run time; fix the file (``vcascade keys generate``) and restart the component.
    """


@dataclass(frozen=True)
class Keypair:
    """A Curve25519 keypair, both keys Z85-encoded (40 ASCII bytes each)."""

    public: bytes
    secret: bytes


# ---------------------------------------------------------------- key files


def key_files(keys_dir: str | Path, name: str) -> tuple[Path, Path]:
    """``(public, secret)`` file paths of component ``name`` in ``keys_dir``."""
    folder = Path(keys_dir)
    return folder / f"{name}{PUBLIC_SUFFIX}", folder / f"{name}{SECRET_SUFFIX}"


def load_keypair(keys_dir: str | Path, name: str) -> Keypair:
    """Load ``keys_dir/NAME.key_secret``.

    Raises:
        SecurityError: the file is missing, unreadable, lacks a well-formed public or secret key, or its
            public key is not the secret key's. A file readable by others is only logged (WARNING).
    """
    _, path = key_files(keys_dir, name)
    public, secret = _load(path)
    if secret is None:
        raise SecurityError(f"{path}: no secret-key in this file (expected the NAME.key_secret certificate)")
    secret = _checked(secret, path, "secret-key")
    if zmq.curve_public(secret) != public:
        raise SecurityError(f"{path}: public-key does not belong to secret-key (file edited or mixed up)")
    if path.stat().st_mode & 0o077:
        log.warning("%s: secret key file is readable by other users (chmod 600 it)", path)
    return Keypair(public, secret)


def load_public_key(keys_dir: str | Path, name: str) -> bytes:
    """Load the public key of component ``name`` from ``keys_dir/NAME.key`` (Z85, 40 bytes).

    Raises:
        SecurityError: the file is missing, unreadable or malformed.
    """
    public, _ = _load(key_files(keys_dir, name)[0])
    return public


def _load(path: Path) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise SecurityError(f"{path}: cannot read key file: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError):
        raise SecurityError(f"{path}: not a ZeroMQ certificate (no public-key line)") from None
    return _checked(public, path, "public-key"), secret


def _checked(key: bytes, path: Path, what: str) -> bytes:
    try:
        if len(key) == Z85_KEY_CHARS and len(zmq.utils.z85.decode(key)) == 32:
            return key
    except (ValueError, KeyError, TypeError):
        pass
    raise SecurityError(f"{path}: malformed {what} (expected {Z85_KEY_CHARS} Z85 characters)")


def authorized_dir(security: SecurityConfig) -> Path:
    """The folder of client public keys a broker accepts (``authorized_dir``, else ``keys_dir``)."""
    curve = security.curve
    return Path(curve.authorized_dir if curve.authorized_dir is not None else curve.keys_dir)


def load_authorized(security: SecurityConfig) -> dict[str, bytes]:
    """Load every ``*.key`` in the authorized folder: the client public keys (Z85) by name (``NAME.key``).

    Raises:
        SecurityError: the folder is missing, holds no ``*.key``, or one of them is malformed.
    """
    folder = authorized_dir(security)
    if not folder.is_dir():
        raise SecurityError(f"{folder}: authorized keys folder does not exist")
    files = sorted(folder.glob(f"*{PUBLIC_SUFFIX}"))
    if not files:
        raise SecurityError(f"{folder}: no *{PUBLIC_SUFFIX} public key in the authorized keys folder")
    return {path.name.removesuffix(PUBLIC_SUFFIX): _load(path)[0] for path in files}


def check_keys(deployment: Deployment, name: str) -> list[Path]:
    """Load every key file component ``name`` will need at start; returns the files checked.

    Broker or stage group: its own keypair and the authorized folder. Edge or worker: its own keypair and each of its
    brokers' public keys. Nothing is checked when CurveZMQ is disabled.

    Raises:
        SecurityError: the first missing, unreadable or malformed file.
        KeyError: ``name`` is no component of the deployment.
    """
    security = deployment.security
    if not security.curve.enabled:
        return []
    keys_dir = security.curve.keys_dir
    load_keypair(keys_dir, name)
    checked = [key_files(keys_dir, name)[1]]
    if name in deployment.brokers or name in deployment.stage_groups:
        load_authorized(security)
        return [*checked, authorized_dir(security)]
    component = deployment.edges.get(name) or deployment.workers.get(name)
    if component is None:
        raise KeyError(f"{name!r} is no broker, edge or worker of the deployment")
    for broker in component.brokers:
        load_public_key(keys_dir, broker)
        checked.append(key_files(keys_dir, broker)[0])
    return checked


# ---------------------------------------------------------------- sockets


def secure_server(sock: zmq.Socket, security: SecurityConfig, name: str) -> None:
    """Make ``sock`` a CURVE server with broker ``name``'s keypair. Call before ``bind``. No-op when disabled.

    Clients are admitted by the ZAP handler of :func:`vcascade.core.transport.zap.start_authenticator` (start it first);
    give the socket its role with :meth:`vcascade.core.transport.zap.RoleAuthenticator.admit` before ``bind``, else it
    admits nobody.

    Raises:
        SecurityError: ``keys_dir/NAME.key_secret`` missing or malformed.
    """
    if not security.curve.enabled:
        return
    keys = load_keypair(security.curve.keys_dir, name)
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True


def secure_client(sock: zmq.Socket, security: SecurityConfig, name: str, server_name: str) -> None:
    """Make ``sock`` a CURVE client of broker ``server_name`` with ``name``'s keypair. Call before ``connect``.

    No-op when disabled. One socket talks to one broker (its public key is pinned on the socket).

    Raises:
        SecurityError: ``keys_dir/NAME.key_secret`` or ``keys_dir/SERVER_NAME.key`` missing or malformed.
    """
    if not security.curve.enabled:
        return
    keys = load_keypair(security.curve.keys_dir, name)
    sock.curve_serverkey = load_public_key(security.curve.keys_dir, server_name)
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public


# ---------------------------------------------------------------- refused handshakes

def auth_failures_counter(component: str) -> Counter:
    """``vcascade_<component>_auth_failures_total{<component>, reason}``, declared once per process."""
    return event_counter(
        component, "auth_failures", "CurveZMQ handshakes that failed on this socket (nothing got through), by reason.",
        "reason",
    )


class AuthFailureMonitor:
    """Counts failed handshakes on one socket, from its :class:`vcascade.core.transport.monitor.SocketMonitor`.

    On a broker (server) socket these are clients it refused; on an edge or worker (client) socket, a broker
    that refused this client's key (``unauthorized``) or one that does not hold the pinned key (``no_detail``:
    the server just closes the connection).

    Create it in the socket's owning thread, before bind/connect. It stops by itself when the socket is
    closed (libzmq sends ``EVENT_MONITOR_STOPPED``) or on :meth:`stop`.

    Args:
        sock: the socket to watch.
        component: ``broker``, ``edge`` or ``worker`` (metric name and label key).
        name: the component's name (label value).
        refusals: on a server socket with a role, its gate's :meth:`vcascade.core.transport.zap.RoleGate.refusal_reason`,
            which tells ZAP refusals apart (``wrong_role`` or ``unauthorized``); None: all are ``unauthorized``.
        also: handlers of other events of the same socket (libzmq keeps one monitor per socket), e.g.
            :meth:`vcascade.core.transport.disconnects.DisconnectCounter.handlers`.
    """

    def __init__(
        self, sock: zmq.Socket, component: str, name: str, refusals: Callable[[], str] | None = None,
        also: Mapping[int, EventHandler] | None = None,
    ) -> None:  # fmt: skip
        self._refusals = refusals
        self.counts: Tally[str] = Tally()
        self._metric = auth_failures_counter(component)
        self._name, self._component = name, component
        handlers = {**{event: self._on_failure for event in FAILURE_REASONS}, **(also or {})}
        self._monitor = SocketMonitor(sock, f"auth-monitor-{name}", handlers)

    @property
    def total(self) -> int:
        """Refused handshakes counted so far, all reasons."""
        return sum(self.counts.values())

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the monitor's thread (it closes its monitor socket) and wait up to ``timeout_s`` seconds."""
        self._monitor.stop(timeout_s)

    def _on_failure(self, event: int, value: int) -> None:
        reason = FAILURE_REASONS[event]
        if reason == "unauthorized" and self._refusals is not None:
            reason = self._refusals()  # queued by the ZAP handler before it answered
        self._count(reason, value)

    def _count(self, reason: str, value: int) -> None:
        self.counts[reason] += 1
        self._metric.labels(self._name, reason).inc()
        level = logging.WARNING if self.counts[reason] == 1 else logging.DEBUG  # no log line per attempt
        log.log(level, "%s %s: CurveZMQ handshake failed (%s, code %d)", self._component, self._name, reason, value)


def watch_auth_failures(
    sock: zmq.Socket, component: str, name: str, refusals: Callable[[], str] | None = None,
    also: Mapping[int, EventHandler] | None = None,
) -> AuthFailureMonitor:  # fmt: skip
    """Start counting refused handshakes of ``sock`` (and handing its ``also`` events on); see
    :class:`AuthFailureMonitor`."""
    return AuthFailureMonitor(sock, component, name, refusals, also)

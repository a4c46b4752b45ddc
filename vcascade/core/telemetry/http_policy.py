"""What the bounded HTTP server (:mod:`vcascade.core.telemetry.http_server`) serves and checks, without its
I/O: the bounds, a request and an answer, the connection limit from ``RLIMIT_NOFILE``, the ``Host`` check, the
token comparison, and the headers every answer carries."""

from __future__ import annotations

import hmac
import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names every server accepts (a browser on the same host); others come from the configuration."""
FRAME_ANCESTORS = "frame-ancestors 'none'"
DEFAULT_CSP = f"default-src 'none'; {FRAME_ANCESTORS}"
"""Content-Security-Policy of answers that set none: nothing loads from them, nobody frames them."""


@dataclass(frozen=True)
class HttpLimits:
    """Bounds of one server. Defaults suit a scraper or a few browsers; every value is a ceiling.

    Attributes:
        max_connections: connections held at once, at most (the derived fd share may lower it).
        header_timeout_s: time from the connection (or TLS handshake start) to the end of the request head, s.
        idle_timeout_s: time a kept-alive connection may wait for its next request, s.
        write_timeout_s: time a client has to read one answer (or one part of a stream), s.
        max_header_bytes: request line and headers together, bytes.
        workers: threads running route handlers (requests wait for one beyond this).
    """

    max_connections: int = 64
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    max_header_bytes: int = 16 * 1024
    workers: int = 4


@dataclass(frozen=True)
class Request:
    """One authorized GET or HEAD: ``path`` without its trailing ``/`` (``/`` for the root), the parsed query,
    headers by lower-case name."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class Response:
    """An answer. With ``stream``, the body is produced part by part: the server calls ``stream()`` (in the
    handler pool) every ``stream_interval_s`` and writes what it returns (``b""``: nothing new), until it
    returns None or ``stream_max_s`` passed; the connection then closes."""

    status: int
    content_type: str = "text/plain; charset=utf-8"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    stream: Callable[[], bytes | None] | None = None
    stream_interval_s: float = 0.5
    stream_max_s: float = 3600.0


def text(status: int, message: str) -> Response:
    """A plain-text answer of one line."""
    return Response(status, body=f"{message}\n".encode())


def connection_limit(configured: int) -> int:
    """Connections one server may hold: ``configured``, lowered to an eighth of the file descriptors still free
    under the soft ``RLIMIT_NOFILE`` (open ones counted in /proc/self/fd), at least 4.

    Up to three servers run in one process (metrics, preview, view): together they take under half of what
    was free, the cameras' decoders and the ZeroMQ sockets keep the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: assume a small process
        open_now = 64
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(4, min(configured, (soft - open_now) // 8))


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    """True when the ``Host`` header's name (port removed, IPv6 brackets removed, case ignored) is in
    ``allowed``, or ``allowed`` holds ``*``."""
    if "*" in allowed:
        return True
    if not host_header:
        return False
    value = host_header.strip().lower()
    if value.startswith("["):
        name = value[1:value.find("]")] if "]" in value else value
    else:
        name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return name in allowed


def allowed_names(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, the bind address (unless a wildcard) and ``extra``, lower-case."""
    names = set(LOOPBACK_NAMES) | {name.lower().strip("[]") for name in extra}
    if bind not in ("0.0.0.0", "::", "*", ""):
        names.add(bind.lower().strip("[]"))
    return frozenset(names)


def token_ok(presented: str | None, token: str | None) -> bool:
    """True when no token is required, or ``presented`` equals it (constant time, :func:`hmac.compare_digest`)."""
    if token is None:
        return True
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


def answer_headers(response: Response) -> list[tuple[str, str]]:
    """The response's headers with the content type and the headers every answer carries."""
    headers = {"Content-Type": response.content_type, "Cache-Control": "no-store",
               "X-Content-Type-Options": "nosniff"} | response.headers  # fmt: skip
    csp = headers.get("Content-Security-Policy")
    headers["Content-Security-Policy"] = DEFAULT_CSP if csp is None else (
        csp if "frame-ancestors" in csp else f"{csp}; {FRAME_ANCESTORS}"
    )
    return list(headers.items())


def raw_answer(status: int, message: str, extra: dict[str, str] | None = None) -> bytes:
    """A whole closing plain-text answer, written without h11 (refusals before or outside a request cycle)."""
    body = f"{message}\n".encode()
    reason = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large",
              503: "Service Unavailable"}.get(status, "Error")  # fmt: skip
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}",
             "Connection: close", "X-Content-Type-Options: nosniff", f"Content-Security-Policy: {DEFAULT_CSP}",
             *(f"{k}: {v}" for k, v in (extra or {}).items())]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body



"""Read-only HTTP endpoints with an optional shared token: the edges' previews (vcascade/edge/preview/server.py)
and the live view (vcascade/app/ui/server.py).

Only ``GET`` and ``HEAD`` are served; any other method is refused with 405, so nothing can be changed through
these endpoints. With a token, every request must present it, as ``Authorization: Bearer <token>``, a
``token`` query parameter, or the :data:`TOKEN_COOKIE` cookie; a request without it, or with another, is
refused with 401 before any handler runs. Tokens are compared in constant time (:func:`hmac.compare_digest`).
Requests are never logged (a URL may carry the token).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

TOKEN_COOKIE = "vcascade_ui_token"
"""Cookie carrying the token after the first request that gave it as ``?token=``."""


class HttpPortInUse(OSError):
    """The configured port of a read-only HTTP endpoint is taken. Recovery: change the port or stop the other
    process."""


def presented_token(headers: Any, query: dict[str, list[str]]) -> str | None:
    """The token a request presents: the bearer token, else the ``token`` query parameter, else the cookie."""
    auth = headers.get("Authorization") or ""
    if auth.startswith("Bearer "):
        return auth[len("Bearer "):].strip()
    if query.get("token"):
        return query["token"][0]
    try:
        cookie = SimpleCookie(headers.get("Cookie") or "")
    except CookieError:
        return None
    morsel = cookie.get(TOKEN_COOKIE)
    return morsel.value if morsel is not None else None


def token_matches(presented: str | None, token: str | None) -> bool:
    """True when no token is required, or ``presented`` equals it (constant-time comparison)."""
    if token is None:
        return True
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


class ReadOnlyHandler(BaseHTTPRequestHandler):
    """Base handler: token gate, then :meth:`route` (override) with the path and query; 405 for writes.

    Subclasses set ``token`` (None: open) and implement :meth:`route`.
    """

    token: str | None = None
    server_version = "vcascade"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if not token_matches(presented_token(self.headers, query), self.token):
            self.reply(401, "text/plain; charset=utf-8", b"unauthorized: a valid token is required\n",
                       {"WWW-Authenticate": "Bearer"})
            return
        self.route(parts.path.rstrip("/") or "/", query)

    do_HEAD = do_GET

    def _refuse_write(self) -> None:
        self.reply(405, "text/plain; charset=utf-8", b"read-only: only GET is served\n", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_write

    def route(self, path: str, query: dict[str, list[str]]) -> None:
        """Answer one authorized GET (override)."""
        self.reply(404, "text/plain; charset=utf-8", b"not found\n")

    def reply(self, code: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        """Send a whole response (no caching: everything here is live)."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, value: Any, code: int = 200) -> None:
        """Send ``value`` as JSON."""
        self.reply(code, "application/json", json.dumps(value).encode())

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (signature of http.server)
        pass


class _QuietServer(ThreadingHTTPServer):
    """Threaded server; a client that went away mid-response is logged at DEBUG, not as a traceback."""

    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        log.debug("request from %s failed", client_address[0], exc_info=True)


def serve_read_only(host: str, port: int, handler: type[ReadOnlyHandler], name: str) -> ThreadingHTTPServer:
    """Serve ``handler`` at ``http://host:port`` from a daemon thread named ``name``.

    Returns:
        The running server (``server_address[1]`` is the port when ``port`` was 0; ``shutdown()`` stops it).

    Raises:
        HttpPortInUse: the address cannot be bound.
    """
    try:
        server = _QuietServer((host, port), handler)
    except OSError as exc:
        raise HttpPortInUse(f"{name}: cannot bind {host}:{port}: {exc.strerror}") from None
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server

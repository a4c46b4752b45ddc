"""Read-only HTTP endpoints with an optional shared token: the edges' previews (vcascade/edge/preview/server.py)
and the live view (vcascade/app/ui/server.py), served by :mod:`vcascade.core.telemetry.http_server` (bounded
connections, timeouts, Host check, refusals counted).

Only ``GET`` and ``HEAD`` are served; any other method is refused with 405, so nothing can be changed through
these endpoints. With a token, every request must present it, as ``Authorization: Bearer <token>``, a
``token`` query parameter, or the :data:`TOKEN_COOKIE` cookie; a request without it, or with another, is
refused with 401 before any handler runs. Tokens are compared in constant time (:func:`hmac.compare_digest`).
Requests are never logged (a URL may carry the token).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Any

from vcascade.core.telemetry.http_server import (
    BoundedHttpServer, HttpLimits, HttpPortInUse, Request, Response, serve_http, text, token_ok,
)  # fmt: skip

__all__ = ["TOKEN_COOKIE", "HttpPortInUse", "Request", "Response", "json_response", "presented_token",
           "serve_read_only", "text"]  # fmt: skip

TOKEN_COOKIE = "vcascade_ui_token"
"""Cookie carrying the token after the first request that gave it as ``?token=``."""


def presented_token(headers: Mapping[str, str], query: dict[str, list[str]]) -> str | None:
    """The token a request presents (``headers`` by lower-case name): the bearer token, else the ``token``
    query parameter, else the cookie."""
    auth = headers.get("authorization") or ""
    if auth.startswith("Bearer "):
        return auth[len("Bearer "):].strip()
    if query.get("token"):
        return query["token"][0]
    try:
        cookie = SimpleCookie(headers.get("cookie") or "")
    except CookieError:
        return None
    morsel = cookie.get(TOKEN_COOKIE)
    return morsel.value if morsel is not None else None



def json_response(value: Any, status: int = 200) -> Response:
    """``value`` as a JSON answer."""
    return Response(status, "application/json", json.dumps(value).encode())


def serve_read_only(
    host: str, port: int, route: Callable[[Request], Response], name: str, *, token: str | None = None,
    allowed_hosts: Iterable[str] = (), limits: HttpLimits = HttpLimits(),
) -> BoundedHttpServer:
    """Serve ``route`` at ``http://host:port`` (thread ``name``), behind the token when one is given.

    Returns:
        The running server (``server_address[1]`` is the port when ``port`` was 0; ``shutdown()`` stops it).

    Raises:
        HttpPortInUse: the address cannot be bound.
    """
    gate = None if token is None else (lambda request: token_ok(presented_token(request.headers, request.query), token))
    return serve_http(name, host, port, route, limits=limits, allowed_hosts=allowed_hosts, gate=gate)

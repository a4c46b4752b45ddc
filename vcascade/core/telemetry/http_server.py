"""One bounded HTTP/1.1 server for every HTTP endpoint of vcascade: metrics (:mod:`.metrics`), the edges'
previews (vcascade/edge/preview/server.py) and the live view (vcascade/app/ui/server.py).

An asyncio event loop in one daemon thread reads and writes every connection with h11 (a sans-I/O HTTP/1.1
parser); the route handlers (plain functions, they may block on I/O) run in a small thread pool, one request
per connection at a time. Every resource a client can hold is bounded, and every refusal is counted in
``vcascade_http_refused_total{server, reason}``:

=================  ======================================================================================
reason             when
=================  ======================================================================================
``connections``    the server already holds :attr:`HttpLimits.max_connections` (503, then closed)
``header_timeout`` the request head did not arrive within ``header_timeout_s`` (408)
``too_large``      the request head exceeds ``max_header_bytes`` (431)
``bad_request``    not HTTP/1.1 that h11 accepts (400), or a TLS handshake that failed or timed out
``method``         a method other than GET and HEAD (405: every endpoint is read-only)
``body``           a GET or HEAD with a body (413)
``host``           a ``Host`` header naming none of the allowed names (421, DNS rebinding)
``unauthorized``   a token is configured and the request does not present it (401)
``write_timeout``  the client did not read the answer within ``write_timeout_s`` (closed)
``handler_error``  the route handler raised (500 ``internal error``; one log line naming the exception's type and
                   where it was raised, never its message)
=================  ======================================================================================

A connection idle between requests for ``idle_timeout_s`` is closed (not a refusal). The connection limit
never exhausts the process's file descriptors: it is at most an eighth of the descriptors still free under
``RLIMIT_NOFILE`` when the server starts (:func:`connection_limit`), so cameras and sockets keep the rest.
Every answer carries ``X-Content-Type-Options: nosniff``, a ``Content-Security-Policy`` with
``frame-ancestors 'none'`` (no other site can frame a page) and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

import h11
from prometheus_client import Counter, Gauge

from vcascade.core.telemetry.http_policy import (  # noqa: F401  (re-exported: the server's API)
    DEFAULT_CSP, FRAME_ANCESTORS, LOOPBACK_NAMES, HttpLimits, Request, Response, allowed_names, answer_headers,
    connection_limit, host_allowed, raw_answer, text, token_ok,
)  # fmt: skip
from vcascade.core.telemetry.logs import failure_site

log = logging.getLogger(__name__)

HTTP_REFUSED = Counter(
    "vcascade_http_refused_total", "Requests and connections an HTTP server (metrics, preview, ui) refused, by reason.",
    ["server", "reason"],
)
HTTP_CONNECTIONS = Gauge("vcascade_http_connections", "Connections an HTTP server holds open now.", ["server"])
HTTP_CONNECTION_LIMIT = Gauge(
    "vcascade_http_connection_limit", "Most connections an HTTP server holds at once (derived from RLIMIT_NOFILE).",
    ["server"],
)
READ_CHUNK_BYTES = 16 * 1024


class HttpPortInUse(OSError):
    """The address of an HTTP endpoint cannot be bound. Recovery: change the port or stop the other process."""


class BoundedHttpServer:
    """A running server (see the module doc). Start with :func:`serve_http`.

    Attributes:
        server_address: ``(host, port)`` bound (the port is the real one when 0 was asked).
        max_connections: the connection limit in force.
    """

    def __init__(
        self, name: str, sock: socket.socket, handler: Callable[[Request], Response], *, limits: HttpLimits,
        allowed_hosts: frozenset[str], gate: Callable[[Request], bool] | None, ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.name, self._sock, self._handler, self.limits = name, sock, handler, limits
        self._allowed, self._gate, self._ssl = allowed_hosts, gate, ssl_context
        self.server_address = sock.getsockname()[:2]
        self.max_connections = connection_limit(limits.max_connections)
        self._open = 0
        self._tasks: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix=f"{name}-handler")
        self._loop = asyncio.new_event_loop()
        self._stopped = threading.Event()
        HTTP_CONNECTION_LIMIT.labels(name).set(self.max_connections)
        HTTP_CONNECTIONS.labels(name).set(0)
        for reason in ("connections", "header_timeout", "host", "unauthorized", "handler_error"):
            HTTP_REFUSED.labels(name, reason)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"http-{name}", daemon=True)
        self._thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._spawn(self._accept())
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()
            self._sock.close()
            self._stopped.set()

    async def _accept(self) -> None:
        """Accept connections one by one; each is counted against the limit before any byte is read (a TLS
        handshake included)."""
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._sock)
            except OSError as exc:  # out of descriptors (EMFILE): wait for some to be freed
                log.warning("%s: cannot accept a connection: %s", self.name, exc.strerror)
                await asyncio.sleep(0.5)
                continue
            self._spawn(self._connection(conn))

    def _spawn(self, coro) -> None:  # noqa: ANN001 (a coroutine)
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def shutdown(self) -> None:
        """Stop accepting, close every connection, stop the thread (within a few seconds)."""
        if self._loop.is_closed():
            return

        async def stop() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(stop()))
        self._stopped.wait(10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    server_close = shutdown

    def _refuse(self, reason: str) -> None:
        HTTP_REFUSED.labels(self.name, reason).inc()

    async def _connection(self, conn: socket.socket) -> None:
        if self._open >= self.max_connections:
            self._refuse("connections")
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                if self._ssl is None:
                    conn.send(raw_answer(503, "too many connections", {"Retry-After": "5"}))
            conn.close()
            return
        self._open += 1
        HTTP_CONNECTIONS.labels(self.name).set(self._open)
        writer = None
        try:
            reader = asyncio.StreamReader(limit=READ_CHUNK_BYTES, loop=self._loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=self._loop)
            handshake_s = self.limits.header_timeout_s if self._ssl is not None else None
            try:
                transport, _ = await asyncio.wait_for(self._loop.connect_accepted_socket(
                    lambda: protocol, conn, ssl=self._ssl, ssl_handshake_timeout=handshake_s,
                ), self.limits.header_timeout_s + 1)  # fmt: skip
            except (TimeoutError, ssl.SSLError, ConnectionError, OSError):
                self._refuse("bad_request")  # a TLS handshake that failed or did not end in time
                conn.close()
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
            await self._serve(reader, writer)
        except (ConnectionError, OSError):
            pass  # the client went away
        finally:
            self._open -= 1
            HTTP_CONNECTIONS.labels(self.name).set(self._open)
            if writer is not None:
                writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        first = True
        while True:
            timeout_s = self.limits.header_timeout_s if first else self.limits.idle_timeout_s
            try:
                event, got_bytes = await self._next_request(conn, reader, timeout_s)
            except TimeoutError as exc:
                if first or exc.args == ("partial",):
                    self._refuse("header_timeout")
                    await self._sendraw_answer(writer, 408, "the request head did not arrive in time")
                return
            except h11.RemoteProtocolError as exc:
                too_large = exc.error_status_hint == 431
                self._refuse("too_large" if too_large else "bad_request")
                await self._sendraw_answer(writer, exc.error_status_hint, "request head too large" if too_large else "bad request")
                return
            if event is None:  # the client closed
                return
            first = False
            response, close = self._check(event)
            if response is None:
                conn.next_event()  # the request's EndOfMessage: no body, nothing to wait for
                response = await self._loop.run_in_executor(self._pool, self._call, event)
            if not await self._send(conn, writer, event.method == b"HEAD", response, close):
                return
            conn.start_next_cycle()

    async def _next_request(self, conn: h11.Connection, reader: asyncio.StreamReader, timeout_s: float):
        """The next h11 Request (with its EndOfMessage consumed when the request has no body) or None at EOF."""
        deadline, got = self._loop.time() + timeout_s, 0
        while True:
            event = conn.next_event()
            if got > self.limits.max_header_bytes and not isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            if event is h11.NEED_DATA:
                remaining = deadline - self._loop.time()
                try:
                    if remaining <= 0:
                        raise TimeoutError
                    data = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), remaining)
                except TimeoutError:
                    raise TimeoutError("partial" if got else "idle") from None
                got += len(data)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.ConnectionClosed):
                return None, got
            return event, got

    def _check(self, event: h11.Request) -> tuple[Response | None, bool]:
        """A refusal for a request that must not reach the handler (and whether to close), else (None, False)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        if event.method not in (b"GET", b"HEAD"):
            self._refuse("method")
            return Response(405, body=b"read-only: only GET and HEAD are served\n", headers={"Allow": "GET, HEAD"}), True
        if headers.get("transfer-encoding") or headers.get("content-length", "0") != "0":
            self._refuse("body")
            return text(413, "a GET carries no body"), True
        if not host_allowed(headers.get("host"), self._allowed):
            self._refuse("host")
            return text(421, "unknown Host: add it to allowed_hosts in the configuration"), True
        return None, False

    def _call(self, event: h11.Request) -> Response:
        """Run the gate and the handler for one request (in the pool)."""
        parts = urlsplit(event.target.decode("latin-1"))
        request = Request(
            event.method.decode(), parts.path.rstrip("/") or "/", parse_qs(parts.query),
            {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers},
        )
        if self._gate is not None and not self._gate(request):
            self._refuse("unauthorized")
            return Response(401, body=b"unauthorized: a valid token is required\n", headers={"WWW-Authenticate": "Bearer"})
        try:
            return self._handler(request)
        except Exception as exc:  # a handler bug answers 500, counted; the server keeps serving
            self._refuse("handler_error")
            log.error("%s: the handler of %s failed: %s", self.name, request.path, failure_site(exc))
            return text(500, "internal error")

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, head: bool, response: Response,
                    close: bool) -> bool:
        """Write one answer; False when the connection must close afterwards (or already did)."""
        close = close or response.stream is not None
        headers = answer_headers(response) + ([("Connection", "close")] if close else [])
        if response.stream is None:
            headers.append(("Content-Length", str(len(response.body))))
        data = conn.send(h11.Response(status_code=response.status, headers=headers))
        if response.stream is None:
            data += b"" if head else conn.send(h11.Data(data=response.body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
        if not await self._write(writer, data):
            return False
        if response.stream is not None and not head:
            await self._stream(conn, writer, response)
        return not close and conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _stream(self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response) -> None:
        ends = self._loop.time() + response.stream_max_s
        while self._loop.time() < ends:
            part = await self._loop.run_in_executor(self._pool, response.stream)
            if part is None:
                break
            if part and not await self._write(writer, conn.send(h11.Data(data=part)) or b""):
                return
            await asyncio.sleep(response.stream_interval_s)
        await self._write(writer, conn.send(h11.EndOfMessage()) or b"")

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> bool:
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
        except TimeoutError:
            self._refuse("write_timeout")
            return False
        return True

    async def _sendraw_answer(self, writer: asyncio.StreamWriter, status: int, message: str) -> None:
        try:
            await self._write(writer, raw_answer(status, message))
        except (ConnectionError, OSError):
            pass


def serve_http(
    name: str, host: str, port: int, handler: Callable[[Request], Response], *, limits: HttpLimits = HttpLimits(),
    allowed_hosts: Iterable[str] = (), gate: Callable[[Request], bool] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> BoundedHttpServer:
    """Bind ``host:port`` and serve ``handler`` from a daemon thread ``http-<name>``.

    Args:
        name: ``metrics``, ``preview`` or ``ui`` (label of the ``vcascade_http_*`` series).
        host, port: address to bind (port 0: any free port, see ``server_address``).
        handler: answers one request that passed the checks (runs in the handler pool; may block).
        limits: the bounds (:class:`HttpLimits`).
        allowed_hosts: names accepted in ``Host`` besides loopback names and ``host`` itself (``*``: any).
        gate: returns False to refuse a request with 401 (token check), None: open.
        ssl_context: serve HTTPS with it (server side), None: plain HTTP.

    Raises:
        HttpPortInUse: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise HttpPortInUse(f"{name}: cannot bind {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return BoundedHttpServer(name, sock, handler, limits=limits, allowed_hosts=allowed_names(host, allowed_hosts),
                             gate=gate, ssl_context=ssl_context)  # fmt: skip

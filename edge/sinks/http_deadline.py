"""A ``requests`` session whose attempts end at a wall-clock deadline, however slowly the server trickles.

``requests`` (urllib3) only bounds each socket read (``timeout``); a server sending one byte a second never
trips it. :class:`DeadlineSession` knows the socket of the attempt in progress (its urllib3 connections report
it when they connect and before they wait for an answer) and :meth:`DeadlineSession.attempt` shuts that
socket down at the deadline, which ends any blocked read or write at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class _Attempt:
    """The socket of the attempt in progress, and whether its deadline passed (any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.expired = False

    def track(self, sock: socket.socket | None) -> None:
        with self.lock:
            self.sock = sock
            if self.expired and sock is not None:
                _shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            if self.sock is not None:
                _shut(self.sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _adapter(attempt: _Attempt) -> HTTPAdapter:
    """An adapter whose connections report their socket to ``attempt``."""

    def tracked(base: type[HTTPConnection]) -> type[HTTPConnection]:
        class Tracked(base):  # type: ignore[valid-type, misc]
            def connect(self) -> None:
                super().connect()
                attempt.track(self.sock)

            def getresponse(self):  # noqa: ANN201 (urllib3's signature)
                attempt.track(self.sock)
                return super().getresponse()

        return Tracked

    http_pool = type("DeadlineHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": tracked(HTTPConnection)})
    https_pool = type("DeadlineHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": tracked(HTTPSConnection)})

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": http_pool, "https": https_pool}

    return Adapter(max_retries=0)


class DeadlineSession:
    """A ``requests.Session`` (attribute ``session``) for one thread at a time, with :meth:`attempt`."""

    def __init__(self) -> None:
        self._attempt = _Attempt()
        self.session = requests.Session()
        adapter = _adapter(self._attempt)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    @contextlib.contextmanager
    def attempt(self, deadline_s: float) -> Iterator[_Attempt]:
        """Run one request and its answer's reading inside; at ``deadline_s`` its socket is shut down (the
        blocked call raises or reads EOF) and the yielded object's ``expired`` is True."""
        current = self._attempt
        with current.lock:
            current.sock, current.expired = None, False
        timer = threading.Timer(deadline_s, current.expire)
        timer.daemon = True
        timer.start()
        try:
            yield current
        finally:
            timer.cancel()
            current.track(None)

    def close(self) -> None:
        """Close the connection pool."""
        self.session.close()

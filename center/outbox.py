"""Hand outgoing headers from any thread to the one IO thread that owns the broker sockets.

ZeroMQ sockets are not thread-safe, so only the IO thread touches the DEALER sockets. Other threads (batcher,
stages, head) send ``[broker index][header]`` over an ``inproc`` PUSH socket of their own (created lazily per
thread) to a PULL socket the IO thread polls together with the brokers: zero-latency wake-up, no locks.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import zmq

from vcascade.core.transport.sockets import make_socket, waiting_messages

_counter = itertools.count()


class Outbox:
    """Thread-local PUSH sockets feeding one PULL socket read by the IO thread.

    Create it in the IO thread (it binds the PULL socket there); call :meth:`send` from any thread; the IO
    thread reads with :meth:`waiting` and, once every sending thread has ended, calls :meth:`close`.
    """

    def __init__(self, ctx: zmq.Context) -> None:
        self._ctx = ctx
        self.endpoint = f"inproc://vcascade-worker-outbox-{next(_counter)}"
        self.pull = make_socket(ctx, zmq.PULL)
        self.pull.bind(self.endpoint)
        self._local = threading.local()
        self._pushes: list[zmq.Socket] = []
        self._lock = threading.Lock()

    def send(self, broker: int, header: bytes) -> None:
        """Queue one header frame for broker socket number ``broker`` (any thread, never blocks for long)."""
        push = getattr(self._local, "push", None)
        if push is None:
            push = make_socket(self._ctx, zmq.PUSH)
            push.connect(self.endpoint)
            self._local.push = push
            with self._lock:
                self._pushes.append(push)
        push.send_multipart([str(broker).encode(), header])

    def waiting(self) -> Iterator[tuple[int, bytes]]:
        """IO thread: the queued ``(broker index, header)`` pairs, without blocking, ``RECV_BATCH`` at most per
        call (the rest stay queued and keep :attr:`pull` readable for the next poll)."""
        for broker, header in waiting_messages(self.pull):
            yield int(broker), header

    def close(self) -> None:
        """IO thread, after every sender thread has ended: close the PUSH sockets and the PULL socket."""
        with self._lock:
            for push in self._pushes:
                push.close()
            self._pushes.clear()
        self.pull.close()

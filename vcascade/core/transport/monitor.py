"""The one monitor of a ZeroMQ socket and the daemon thread that hands its events to handlers.

libzmq keeps one monitor per socket (a second ``zmq_socket_monitor`` call replaces the first), so everything
counted from a socket's events (refused CurveZMQ handshakes, :mod:`vcascade.core.transport.security`; lost connections,
:mod:`vcascade.core.transport.disconnects`) shares one :class:`SocketMonitor`, each concern registering handlers for its
events.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
from collections.abc import Callable, Mapping

import zmq
from prometheus_client import Counter
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger(__name__)

EventHandler = Callable[[int, int], None]
"""``handler(event, value)``: a ``zmq.EVENT_*`` number and its value (a file descriptor, an errno, a ZMTP error
code, depending on the event; libzmq's zmq_socket_monitor(3))."""


_COUNTERS: dict[str, Counter] = {}
_COUNTERS_LOCK = threading.Lock()


def event_counter(component: str, thing: str, documentation: str, label: str) -> Counter:
    """``vcascade_<component>_<thing>_total{<component>, <label>}``: a counter of socket events, declared once per
    process (every socket of the process that counts ``thing`` shares it; the components' metrics modules call
    this at import so the family is exported from the start).

    Args:
        component: ``broker``, ``edge``, ``worker`` (metric name and the first label's key).
        thing: what is counted, e.g. ``auth_failures``.
        documentation: the metric's help text.
        label: the second label's key, e.g. ``reason`` or ``socket``.
    """
    name = f"vcascade_{component}_{thing}_total"
    with _COUNTERS_LOCK:
        if name not in _COUNTERS:
            _COUNTERS[name] = Counter(name, documentation, [component, label])
        return _COUNTERS[name]


class SocketMonitor:
    """Watches one socket's events from a daemon thread and calls the handler registered for each.

    Create it in the socket's owning thread, before bind/connect. It stops by itself when the socket is closed
    (libzmq sends ``EVENT_MONITOR_STOPPED``), when the context is terminated, or on :meth:`stop`. Handlers run on
    the monitor's thread: they must be thread-safe and quick (a counter, a log line).

    Args:
        sock: the socket to watch.
        name: the thread's name (for logs and debuggers).
        handlers: ``{zmq.EVENT_*: handler}``; only these events are subscribed.
    """

    POLL_MS = 100
    """Longest the thread waits between checks of its stop flag, ms."""

    def __init__(self, sock: zmq.Socket, name: str, handlers: Mapping[int, EventHandler]) -> None:
        self._handlers = dict(handlers)
        events = functools.reduce(operator.or_, self._handlers, zmq.EVENT_MONITOR_STOPPED)
        self._pair = sock.get_monitor_socket(events=events)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (it closes its monitor socket) and wait up to ``timeout_s`` seconds."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._pair.poll(self.POLL_MS):
                    continue
                event = recv_monitor_message(self._pair)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return
                handler = self._handlers.get(event["event"])
                if handler is not None:
                    handler(event["event"], event["value"])
        except zmq.ZMQError as exc:  # context terminated under us: nothing left to watch
            log.debug("socket monitor %s: %s", self._thread.name, exc)
        finally:
            self._pair.close(linger=0)

"""The edge's link to its brokers: send queue, in-flight window, answers, timeouts, sinks, accounting.

One thread (:class:`BrokerLink`) owns every socket of the edge. The detector thread hands it ROIs with
:meth:`BrokerLink.submit`; a socketpair wakes the link thread at once. Each ROI ends exactly once: as a
result or as a drop with a reason, both written to the sinks and counted per camera, so that
``sent = results + drops`` holds per camera at any quiet moment and at the end.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import zmq

from edge import metrics
from edge.account import PendingRoi, drop_record, result_record
from edge.sinks import Sink
from vcascade import wire
from vcascade.config import Deployment, EdgeConfig
from vcascade.sockets import make_socket

log = logging.getLogger(__name__)

LATENCY_SAMPLES = 20_000
"""End-to-end latencies kept per camera for the run summary's percentiles (a sliding window)."""


@dataclass
class CameraTally:
    """Per-camera accounting: every ROI sent ends in ``results`` or in ``drops[reason]``."""

    sent: int = 0
    results: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    end_to_end_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())


class BrokerLink(threading.Thread):
    """Sends ROIs to the brokers and turns every answer, drop or timeout into one output record."""

    def __init__(self, edge: str, dep: Deployment, ctx: zmq.Context, sinks: list[Sink]) -> None:
        super().__init__(name="broker-link", daemon=True)
        self.edge, self.cfg = edge, dep.edges[edge]
        self.tally: dict[str, CameraTally] = {cam: CameraTally() for cam in dep.cameras_of(edge)}
        self._sinks = sinks
        self._lock = threading.Condition()
        self._queue: deque[tuple[PendingRoi, bytes]] = deque()
        self._in_flight: OrderedDict[str, PendingRoi] = OrderedDict()
        self._closing = False
        self._stopped = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._outbox: deque[dict] = deque()  # finished records, written to the sinks by the link thread only
        self._sockets = []
        for name in self.cfg.brokers:
            sock = make_socket(ctx, zmq.DEALER, identity=f"{edge}-{os.getpid()}-{name}")
            sock.connect(dep.brokers[name].endpoint("frontend"))
            self._sockets.append(sock)
        self._next_broker = 0

    def tally_copy(self) -> dict[str, CameraTally]:
        """A consistent copy of the per-camera accounting, safe to read from any thread."""
        with self._lock:
            return {
                cam: CameraTally(t.sent, t.results, dict(t.drops), deque(t.end_to_end_ms, maxlen=LATENCY_SAMPLES))
                for cam, t in self.tally.items()
            }

    # ------------------------------------------------------------ detector thread side

    def submit(self, pending: PendingRoi, payload: bytes) -> None:
        """Queue an ROI for sending. Counts it as sent for its camera.

        With ``overflow: block`` this waits while the send queue is full; with ``drop_oldest`` the oldest
        queued ROI is dropped (reason ``queue_full``) to make room.
        """
        with self._lock:
            self.tally[pending.camera].sent += 1
            metrics.ROIS_SENT.labels(self.edge, pending.camera).inc()
            while len(self._queue) >= self.cfg.send_queue_max and not self._closing:
                if self.cfg.overflow == "drop_oldest":
                    oldest, _ = self._queue.popleft()
                    self._finish_drop(oldest, "queue_full", self.edge)
                else:
                    self._lock.wait(0.1)
            self._queue.append((pending, payload))
            metrics.SEND_QUEUE.labels(self.edge).set(len(self._queue))
        self._wake()

    def publish(self, record: dict) -> None:
        """Queue a record that is not an ROI (a ``tracked`` line) for the sinks; it enters no accounting."""
        with self._lock:
            self._outbox.append(record)
        self._wake()

    def drain(self, timeout_s: float, on_tick: Callable[[], None] | None = None) -> None:
        """Wait until every submitted ROI is answered (or ``timeout_s`` passes), then stop the thread.

        ROIs still queued or in flight at the deadline are dropped with reason ``shutdown``.
        ``on_tick`` is called about every 0.5 s while waiting (progress reports).
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        while time.monotonic() < deadline:
            with self._lock:
                if not (self._queue or self._in_flight):
                    break
                self._lock.wait(0.5)
            if on_tick:
                on_tick()
        self._stopped.set()
        self._wake()
        self.join(timeout=5.0)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except BlockingIOError:  # the link thread has wake-ups pending already
            pass

    # ------------------------------------------------------------ link thread

    def run(self) -> None:
        poller = zmq.Poller()
        for sock in self._sockets:
            poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while not self._stopped.is_set():
                events = dict(poller.poll(timeout=50))
                if self._wake_r.fileno() in events:
                    self._drain_wakeups()
                for sock in self._sockets:
                    if sock in events:
                        self._receive(sock)
                self._send_ready()
                self._expire(time.perf_counter())
                self._flush_outbox()
        finally:
            self._shutdown()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _send_ready(self) -> None:
        """Send queued ROIs while the in-flight window has room, round-robin across brokers."""
        while True:
            with self._lock:
                if not self._queue or len(self._in_flight) >= self.cfg.max_in_flight:
                    return
                pending, payload = self._queue.popleft()
                metrics.SEND_QUEUE.labels(self.edge).set(len(self._queue))
                self._lock.notify_all()
            self._send(pending, payload)

    def _send(self, pending: PendingRoi, payload: bytes) -> None:
        now = time.perf_counter()
        ttl_ms = 0.0
        if self.cfg.roi.ttl_ms > 0:
            ttl_ms = self.cfg.roi.ttl_ms - (now - pending.capture_s) * 1000.0
            if ttl_ms <= 0:
                with self._lock:
                    self._finish_drop(pending, "stale", self.edge)
                return
        header = msgspec.structs.replace(pending.roi, ttl_ms=ttl_ms) if ttl_ms else pending.roi
        sock = self._sockets[self._next_broker]
        self._next_broker = (self._next_broker + 1) % len(self._sockets)
        pending.sent_s = time.perf_counter()
        with self._lock:
            self._in_flight[pending.roi_id] = pending
            metrics.IN_FLIGHT.labels(self.edge).set(len(self._in_flight))
        sock.send_multipart([wire.encode(header), payload], copy=False)

    def _receive(self, sock: zmq.Socket) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            received_s = time.perf_counter()
            try:
                _, header, _ = wire.split_message(frames, 0)
            except wire.MalformedMessage as exc:
                metrics.MALFORMED.labels(self.edge, exc.reason).inc()
                continue
            if isinstance(header, wire.Result):
                self._on_result(header, received_s)
            elif isinstance(header, wire.Drop):
                self._on_drop(header)
            else:
                metrics.MALFORMED.labels(self.edge, "wrong_kind").inc()

    def _on_result(self, result: wire.Result, received_s: float) -> None:
        with self._lock:
            pending = self._pop(result.roi_id)
            if pending is None:
                return
            record = result_record(pending, result, received_s)
            tally = self.tally[pending.camera]
            tally.results += 1
            tally.end_to_end_ms.append(record["latency_ms"]["end_to_end"])
            self._outbox.append(record)
            self._lock.notify_all()
        metrics.RESULTS.labels(self.edge, pending.camera).inc()
        for hop, ms in record["latency_ms"].items():
            metrics.HOP_SECONDS.labels(self.edge, pending.camera, hop).observe(ms / 1000.0)

    def _on_drop(self, drop: wire.Drop) -> None:
        with self._lock:
            pending = self._pop(drop.roi_id)
            if pending is not None:
                self._finish_drop(pending, drop.reason, drop.where)

    def _pop(self, roi_id: str) -> PendingRoi | None:
        """Remove an ROI from the in-flight table; a reply for an unknown id is late or duplicate."""
        pending = self._in_flight.pop(roi_id, None)
        if pending is None:
            metrics.DUPLICATES.labels(self.edge).inc()
        metrics.IN_FLIGHT.labels(self.edge).set(len(self._in_flight))
        return pending

    def _expire(self, now_s: float) -> None:
        """Drop ROIs unanswered for ``roi_timeout_s`` (the in-flight table is in send order)."""
        with self._lock:
            while self._in_flight:
                roi_id, pending = next(iter(self._in_flight.items()))
                if now_s - pending.sent_s < self.cfg.roi_timeout_s:
                    return
                del self._in_flight[roi_id]
                metrics.IN_FLIGHT.labels(self.edge).set(len(self._in_flight))
                self._finish_drop(pending, "timeout", self.edge)

    def _finish_drop(self, pending: PendingRoi, reason: str, where: str) -> None:
        """Count a drop and queue its record for the sinks. Caller holds the lock."""
        tally = self.tally[pending.camera]
        tally.drops[reason] = tally.drops.get(reason, 0) + 1
        metrics.DROPS.labels(self.edge, pending.camera, reason).inc()
        self._outbox.append(drop_record(pending, reason, where))
        self._lock.notify_all()

    def _flush_outbox(self) -> None:
        """Write finished records to every sink (link thread only: sinks are not thread-safe)."""
        while self._outbox:
            record = self._outbox.popleft()
            for sink in self._sinks:
                try:
                    sink.write(record)
                except Exception:  # a failing sink must not stop the others or the accounting
                    log.exception("sink %s failed", type(sink).__name__)

    def _shutdown(self) -> None:
        with self._lock:
            for pending, _ in self._queue:
                self._finish_drop(pending, "shutdown", self.edge)
            self._queue.clear()
            for pending in self._in_flight.values():
                self._finish_drop(pending, "shutdown", self.edge)
            self._in_flight.clear()
        self._flush_outbox()
        for sock in self._sockets:
            sock.close()
        self._wake_r.close()
        self._wake_w.close()

"""The edge's link to its brokers: send queue, in-flight window, liveness, retries, answers, the way back, accounting.

One thread (:class:`BrokerLink`) owns every socket of the edge. The detector thread hands it ROIs with
:meth:`BrokerLink.submit`; a socketpair wakes the link thread at once. Each ROI ends exactly once: as a
result or as a drop with a reason, both sent down the way back and counted per camera, so that
``sent = results + drops`` holds per camera at any quiet moment and at the end.

Every ending becomes one typed event on the way back (:class:`vcascade.edge.way_back.Answered` or
:class:`~vcascade.edge.way_back.Dropped`), counted with one call to the link's books
(:class:`vcascade.edge.link.state.LinkBooks`) and handed, on the link thread and in order with what the detector
thread publishes (``tracked`` detections, events), to the edge's :class:`~vcascade.edge.way_back.WayBack`.

Reliability (DESIGN.md, "The edge's retries and failover"): the link sends a ``Heartbeat`` to every broker
each ``heartbeat.interval_s`` and tracks each broker's liveness (:mod:`vcascade.edge.link.state`). An ROI goes to the
live broker with the fewest ROIs in flight. An ROI unanswered for ``roi_timeout_s``, or in flight to a broker
declared dead (silent, or its connection closed: :mod:`vcascade.edge.link.sockets`), is sent again (``attempt + 1``,
to another live broker when there is one) up to ``max_attempts`` sends, then dropped (``timeout`` /
``broker_lost``). The first answer per ``roi_id`` ends the ROI; later ones are counted as duplicates and
never written. While no broker is alive the send queue
drops its oldest ROI (``no_broker``) instead of blocking the detector.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

import msgspec
import zmq

from vcascade.core.protocol import wire
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.transport.sockets import waiting_messages
from vcascade.edge.privacy.redaction import RedactedImage, require_redacted
from vcascade.edge.link.sockets import broker_socket, close_broker_socket, disconnected
from vcascade.edge.link.state import (
    LATENCY_SAMPLES, BrokerTable, CameraTally, Flight, LinkBooks, PendingRoi, close_account, may_retry,
)
from vcascade.edge.metrics import EdgeTelemetry
from vcascade.edge.selection.degrade import shed_level
from vcascade.edge.way_back import Answered, Dropped, WayBack, WayBackEvent

log = logging.getLogger(__name__)

POLL_MS = 50
"""Longest the link thread sleeps between checks of heartbeats, liveness and timeouts, ms."""


class BrokerLink(threading.Thread):
    """Sends ROIs to live brokers and turns every answer, drop, timeout or lost broker into one event on the way
    back.

    Args:
        settings: the edge's settings (its section, brokers' endpoints, heartbeat, security).
        ctx: the process's ZeroMQ context.
        way_back: where every event goes, on the link thread (:class:`vcascade.edge.way_back.WayBack`).
    """

    def __init__(self, settings: EdgeSettings, ctx: zmq.Context, way_back: WayBack) -> None:
        super().__init__(name="broker-link", daemon=True)
        self.edge, self.cfg = settings.name, settings.edge
        self.telemetry = EdgeTelemetry(self.edge)
        self.books = LinkBooks(self.telemetry, settings.cameras, self.cfg.roi.deadline_ms)
        self.tally = self.books.tally
        self.way_back = way_back
        self._lock = threading.Condition()
        self._queue: deque[tuple[PendingRoi, bytes]] = deque()  # new ROIs waiting for the window
        self._retries: OrderedDict[str, Flight] = OrderedDict()  # ROIs to send again, before new ones
        self._in_flight: OrderedDict[str, Flight] = OrderedDict()  # in send order
        self._brokers = BrokerTable(self.cfg.brokers, settings.heartbeat.interval_s, settings.heartbeat.liveness)
        self._backlog_ms = [0.0] * len(self.cfg.brokers)  # per broker, from its last heartbeat
        self.shed_level = 0
        """What the ROI policy stops sending while the brokers report a backlog (:mod:`vcascade.edge.selection.degrade`);
        set by the link thread at each broker heartbeat, read by the detector thread."""
        self._closing = False
        self._stopped = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._outbox: deque[WayBackEvent] = deque()  # handed to the way back by the link thread only
        self._sockets: list[zmq.Socket] = []
        self._monitors: list[zmq.Socket] = []
        self._identities: list[str] = []
        for name in self.cfg.brokers:
            identity = f"{self.edge}-{os.getpid()}-{name}"
            sock, monitor = broker_socket(
                ctx, identity, settings.broker_endpoints[name], settings.security, self.edge, name
            )
            self._sockets.append(sock)
            self._monitors.append(monitor)
            self._identities.append(identity)
            self.telemetry.broker_up(name, False)

    def add_camera(self, camera: str) -> None:
        """Open the books of a camera added at run time (a camera added again continues its earlier books)."""
        with self._lock:
            self.books.open_camera(camera)

    def tally_copy(self) -> dict[str, CameraTally]:
        """A consistent copy of the per-camera accounting, safe to read from any thread."""
        with self._lock:
            return {
                cam: CameraTally(t.sent, t.results, dict(t.drops), deque(t.end_to_end_ms, maxlen=LATENCY_SAMPLES))
                for cam, t in self.tally.items()
            }

    def broker_states(self) -> dict[str, dict]:
        """Per broker: ``{"up": bool, "in_flight": int, "sent": int, "silent_s": float | None}``, any thread.

        ``sent`` counts sends to that broker (retries and probes included); ``silent_s`` is the time since its
        last message, seconds (None before the first).
        """
        now_s = time.perf_counter()
        with self._lock:
            return {
                s.name: {
                    "up": self._brokers.alive(i), "in_flight": s.in_flight, "sent": s.sent,
                    "silent_s": None if s.last_heard_s is None else round(now_s - s.last_heard_s, 3),
                }
                for i, s in enumerate(self._brokers.states)
            }  # fmt: skip

    # ------------------------------------------------------------ detector thread side

    def submit(self, pending: PendingRoi, image: RedactedImage) -> None:
        """Queue an ROI for sending. Counts it as sent for its camera.

        ``image`` is its crop as the redaction step made it (:mod:`vcascade.edge.privacy.redaction`); each time it
        goes on a socket it is counted in ``vcascade_edge_images_out_total{exit="roi"}``.

        A full send queue drops its oldest ROI (reason ``queue_full``) with ``overflow: drop_oldest``, and
        always while no broker is alive (reason ``no_broker``: the detector never waits on a dead center);
        otherwise (``overflow: block``) this waits for room.

        Raises:
            TypeError: ``image`` is not a :class:`RedactedImage` made for the ``roi`` exit (nothing is queued).
        """
        payload = require_redacted(image, "roi").jpeg
        pending.redacted = image.redacted
        with self._lock:
            self.books.submitted(pending)
            while len(self._queue) >= self.cfg.send_queue_max and not self._closing:
                if not self._brokers.any_alive:
                    self._finish_drop(self._queue.popleft()[0], "no_broker", self.edge)
                elif self.cfg.overflow == "drop_oldest":
                    self._finish_drop(self._queue.popleft()[0], "queue_full", self.edge)
                else:
                    self._lock.wait(0.1)
            self._queue.append((pending, payload))
            self.telemetry.send_queue_depth(len(self._queue))
        self._wake()

    def publish(self, event: WayBackEvent) -> None:
        """Queue an event that is not an ROI's end (a ``tracked`` detection, an analytics event) for the way back,
        in order with the answers (any thread); it enters no accounting."""
        with self._lock:
            self._outbox.append(event)
        self._wake()

    def drain(self, timeout_s: float, on_tick: Callable[[], None] | None = None) -> None:
        """Wait until every submitted ROI is answered (or ``timeout_s`` passes), then stop the thread.

        ROIs still queued, waiting for a retry or in flight at the deadline are dropped with reason
        ``shutdown``. ``on_tick`` is called about every 0.5 s while waiting (progress reports).
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        while time.monotonic() < deadline:
            with self._lock:
                if not (self._queue or self._retries or self._in_flight):
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
        except OSError:  # closed: the link thread has stopped (drain raced its exit), nobody is left to wake
            pass

    # ------------------------------------------------------------ link thread

    def run(self) -> None:
        poller = zmq.Poller()
        for sock in (*self._sockets, *self._monitors):
            poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while not self._stopped.is_set():
                events = dict(poller.poll(timeout=POLL_MS))
                if self._wake_r.fileno() in events:
                    self._drain_wakeups()
                for index, sock in enumerate(self._sockets):
                    if sock in events:
                        self._receive(index, sock)
                    if self._monitors[index] in events and disconnected(self._monitors[index], self.telemetry):
                        with self._lock:
                            self._lose_broker(index, "disconnected")
                now_s = time.perf_counter()
                self._keep_alive(now_s)
                self._expire(now_s)
                self._send_ready()
                self._flush_outbox()
        finally:
            self._shutdown()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _keep_alive(self, now_s: float) -> None:
        """Heartbeat every broker when due; declare silent brokers dead and retry what they held."""
        if self._brokers.heartbeat_due(now_s):
            for identity, sock in zip(self._identities, self._sockets):
                try:  # ZMQ_IMMEDIATE: refused at once while the broker is not connected, never queued
                    sock.send(wire.encode(wire.Heartbeat(sender=identity)), zmq.NOBLOCK)
                except zmq.Again:
                    pass
        with self._lock:
            for index in self._brokers.expire(now_s):
                self._lose_broker(index, "silent")

    def _lose_broker(self, index: int, why: str) -> None:
        """Broker ``index`` is dead (``silent`` past the liveness window, or ``disconnected``): retry what it
        held through another broker now, or drop it as ``broker_lost`` when out of attempts. Caller holds the lock.
        """
        name = self.cfg.brokers[index]
        was_alive = self._brokers.lost(index)
        self.telemetry.broker_up(name, False)
        lost = [roi_id for roi_id, f in self._in_flight.items() if f.broker == index]
        if was_alive or lost:
            log.warning("edge %s: broker %s lost (%s), %d ROIs in flight there", self.edge, name, why, len(lost))
        for roi_id in lost:
            self._retry_or_drop(self._in_flight.pop(roi_id), "broker_lost")
        self._set_in_flight_gauge()
        self._lock.notify_all()

    def _send_ready(self) -> None:
        """Send retries, then queued ROIs, while the in-flight window has room and a broker can take them."""
        refused: set[int] = set()  # brokers whose socket refused a message this round (not connected)
        with self._lock:
            while len(self._in_flight) < self.cfg.max_in_flight:
                item = self._peek()
                if item is None:
                    break
                pending, payload, avoid = item
                ttl_ms = self._ttl_left_ms(pending)
                if ttl_ms is not None and ttl_ms <= 0:
                    self._take(pending.roi_id)
                    self._finish_drop(pending, "stale", self.edge)
                    continue
                target = self._brokers.choose(avoid, refused)
                if target is None:
                    target = self._brokers.probe_target(refused)
                if target is None:
                    break
                if self._send(pending, payload, target, ttl_ms or 0.0):
                    self._take(pending.roi_id)
                else:
                    refused.add(target)
            self.telemetry.send_queue_depth(len(self._queue))
            self._set_in_flight_gauge()
            self._lock.notify_all()

    def _peek(self) -> tuple[PendingRoi, bytes, int | None] | None:
        """The next ROI to send (a retry first) with the broker it should avoid; None when nothing waits."""
        if self._retries:
            flight = next(iter(self._retries.values()))
            return flight.pending, flight.payload, flight.broker
        if self._queue:
            pending, payload = self._queue[0]
            return pending, payload, None
        return None

    def _take(self, roi_id: str) -> None:
        """Remove the ROI :meth:`_peek` returned from the retry table or the queue."""
        if self._retries.pop(roi_id, None) is None:
            self._queue.popleft()

    def _ttl_left_ms(self, pending: PendingRoi) -> float | None:
        """Time the ROI may still wait before compute, ms (``roi.ttl_ms`` minus its age); None: no deadline."""
        if self.cfg.roi.ttl_ms <= 0:
            return None
        return self.cfg.roi.ttl_ms - (time.perf_counter() - pending.capture_s) * 1000.0

    def _send(self, pending: PendingRoi, payload: bytes, broker: int, ttl_ms: float) -> bool:
        """Put one ROI on broker ``broker``'s socket and record it in flight. Caller holds the lock.

        Returns False when the socket refused it (ZMQ_IMMEDIATE: no connection to that broker right now).
        """
        header = msgspec.structs.replace(pending.roi, ttl_ms=ttl_ms) if ttl_ms else pending.roi
        frame = wire.encode(header)
        sent_s = time.perf_counter()  # before the send: the answer may arrive before a later clock read
        try:
            self._sockets[broker].send_multipart([frame, payload], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        pending.sent_s = sent_s
        self._in_flight[pending.roi_id] = Flight(pending, payload, broker)
        self._brokers.sent(broker)
        self.telemetry.roi_sent_to(self.cfg.brokers[broker])
        self.telemetry.image_out("roi", pending.redacted)
        return True

    def _receive(self, index: int, sock: zmq.Socket) -> None:
        """Take the waiting messages from broker ``index`` (``RECV_BATCH`` at most); any well-formed message
        proves the broker alive (a peer that sends only garbage is not a broker, and must not be given ROIs)."""
        for frames in waiting_messages(sock):
            received_s = time.perf_counter()
            try:
                _, header, _ = wire.split_message(frames, 0)
            except wire.MalformedMessage as exc:
                self.telemetry.malformed(exc.reason)
                continue
            self._heard(index, received_s)
            if isinstance(header, (wire.Result, wire.Drop)):
                self._on_answer(header, received_s)
            elif isinstance(header, wire.Heartbeat):
                self._on_backlog(index, header.backlog_ms)
            else:
                self.telemetry.malformed("wrong_kind")

    def _on_backlog(self, index: int, backlog_ms: float) -> None:
        """Broker ``index`` reported its backlog: recompute the shed level over the live brokers."""
        self._backlog_ms[index] = backlog_ms
        with self._lock:
            live = [ms for i, ms in enumerate(self._backlog_ms) if self._brokers.alive(i)]
        level = shed_level(live, self.cfg.roi.ttl_ms, self.shed_level)
        if level != self.shed_level:
            log.info("edge %s: shed level %d -> %d (broker backlog %.0f ms, ttl %.0f ms)", self.edge,
                     self.shed_level, level, max(live, default=0.0), self.cfg.roi.ttl_ms)  # fmt: skip
            self.shed_level = level

    def _heard(self, index: int, now_s: float) -> None:
        with self._lock:
            revived = self._brokers.heard(index, now_s)
            if revived:
                self._lock.notify_all()  # a detector blocked on a full queue re-checks the overflow rule
        if revived:
            name = self.cfg.brokers[index]
            self.telemetry.broker_up(name, True)
            log.info("edge %s: broker %s alive", self.edge, name)

    def _on_answer(self, answer: wire.Result | wire.Drop, received_s: float) -> None:
        """The first answer for an ROI ends it; answers for ROIs already ended are counted and ignored."""
        with self._lock:
            flight = self._in_flight.pop(answer.roi_id, None)
            if flight is not None:
                self._brokers.settled(flight.broker)
            else:  # a late answer to an ROI waiting for its retry still ends it
                flight = self._retries.pop(answer.roi_id, None)
            if flight is None:
                self.telemetry.duplicate_answer()
                return
            self._set_in_flight_gauge()
            if isinstance(answer, wire.Drop):
                self._finish_drop(flight.pending, answer.reason, answer.where)
                return
            crop = bytes(flight.payload) if flight.pending.keep_crop else None  # the history's evidence, if it may
            answered = Answered(flight.pending, answer, close_account(flight.pending, answer, received_s), crop)
            self.books.answered(flight.pending, answered.latency_ms)
            self._outbox.append(answered)
            self._lock.notify_all()

    def _expire(self, now_s: float) -> None:
        """Retry (or drop as ``timeout``) ROIs unanswered for ``roi_timeout_s`` (the table is in send order)."""
        with self._lock:
            while self._in_flight:
                flight = next(iter(self._in_flight.values()))
                if now_s - flight.pending.sent_s < self.cfg.roi_timeout_s:
                    break
                del self._in_flight[flight.pending.roi_id]
                self._retry_or_drop(flight, "timeout")
            self._set_in_flight_gauge()

    def _retry_or_drop(self, flight: Flight, reason: str) -> None:
        """An ROI taken off the in-flight table without an answer: schedule its next attempt, or drop it.

        Caller holds the lock. The retry keeps its payload and avoids ``flight.broker`` when it can.
        """
        self._brokers.settled(flight.broker)
        roi = flight.pending.roi
        if not may_retry(roi.attempt, self.cfg.max_attempts):
            self._finish_drop(flight.pending, reason, self.edge)
            return
        flight.pending.roi = msgspec.structs.replace(roi, attempt=roi.attempt + 1)
        self._retries[roi.roi_id] = flight
        self.telemetry.roi_retried(reason)

    def _finish_drop(self, pending: PendingRoi, reason: str, where: str) -> None:
        """Count a drop and queue it for the way back. Caller holds the lock."""
        self.books.dropped(pending, reason)
        self._outbox.append(Dropped(pending, reason, where))
        self._lock.notify_all()

    def _set_in_flight_gauge(self) -> None:
        self.telemetry.in_flight(len(self._in_flight))

    def _flush_outbox(self) -> None:
        """Hand the queued events to the way back, in order (link thread). Its consumers never block: the output
        sinks queue each line for their own delivery thread, which delivers it or counts it lost
        (:class:`vcascade.edge.sinks.queue.QueuedSink`), so the books and each sink's lines agree (written + lost =
        lines, once its queue is empty)."""
        while self._outbox:
            self.way_back.deliver(self._outbox.popleft())

    def _shutdown(self) -> None:
        with self._lock:
            flights = (*self._retries.values(), *self._in_flight.values())
            for pending in [p for p, _ in self._queue] + [f.pending for f in flights]:
                self._finish_drop(pending, "shutdown", self.edge)
            self._queue.clear()
            self._retries.clear()
            self._in_flight.clear()
        self._flush_outbox()
        for sock, monitor in zip(self._sockets, self._monitors):
            close_broker_socket(sock, monitor)
        self._wake_r.close()
        self._wake_w.close()


"""The broker process: a ZeroMQ ROUTER for edges (frontend), a ROUTER for workers (backend), and the loop between.

Edges send ``[Roi][jpeg]``; the broker hands each to a worker with free credit at once when nothing queued could go
first, else queues it per (recognizer, camera) (:class:`vcascade.broker.dispatch.Dispatcher` decides both), and forwards
the payload frame *as received* (zero copy); the header is forwarded as received too, or re-encoded with the
remaining ``ttl_ms`` when the ROI has a deadline and waited here (the wait is taken off, so the worker's deadline is
the edge's deadline, not a fresh one). Workers send ``Ready``
(registration, credits and heartbeat), ``Result``/``Drop`` per ROI, and ``Bye``. Results go back to the edge that
sent the ROI with three broker hops appended to the latency account; every ROI the broker gives up on is
answered with a ``Drop`` so the edge's books balance (DESIGN.md "Wire protocol", "Load balancing").
Bad input is counted in ``vcascade_broker_malformed_messages_total`` and dropped; nothing a peer sends can
crash the loop.

Liveness (Paranoid Pirate; DESIGN.md "Load balancing and reliability"): heartbeats to workers and recent edges
(who is silent: :class:`vcascade.core.transport.liveness.PeerLiveness`); a lost worker's ROIs are re-queued up to
``max_attempts`` dispatches, its late answers counted, never forwarded. So are the ROIs a worker holds past
``answer_timeout_s`` (taken back, the worker's credits with them), and those of a worker evicted for a new one
at ``max_workers`` (docs/RELIABILITY.md, "Broker bounds").
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

import msgspec
import zmq

from vcascade.broker.backlog import QueueBacklog, finite_ms
from vcascade.broker.bind import broker_sockets
from vcascade.broker.books import Envelope, broker_hops, ms, remaining_ttl_ms, send_failure_reason
from vcascade.broker.dispatch import ByteBounds, Dispatcher, InFlight, Pending, RecognizerChanged, WorkerLimit
from vcascade.broker.metrics import BrokerTelemetry
from vcascade.core.protocol import wire
from vcascade.core.schema.broker import HeartbeatConfig
from vcascade.core.schema.broker_settings import BrokerSettings
from vcascade.core.telemetry.health import READINESS
from vcascade.core.transport.liveness import PeerLiveness
from vcascade.core.transport.sockets import send_frames, waiting_messages
from vcascade.core.runtime.stop import StopFlag
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.core.transport.zap import start_authenticator

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 2.0
"""At shutdown, how long in-flight ROIs may still come back before they are answered with Drop ``shutdown``."""

POLL_MS = 100
"""Poll timeout, ms: the longest the loop goes without checking stop, worker expiry and deadlines."""

MAX_EDGES = 4096
"""Edges remembered at most (heartbeat targets); the least recently heard is forgotten first (a peer cycling
identities cannot grow memory). A forgotten edge still gets its answers (they carry its routing id), only no
heartbeats until its next message."""

REPORT_EVERY_S = 1.0
"""Interval of the ``report`` callback, seconds."""

MAX_CREDITS = 100_000
"""Largest credit count accepted in a Ready (``WorkerConfig.credits`` bound)."""


def run_broker(
    settings: BrokerSettings,
    stop: StopFlag,
    report: Callable[[dict], None] | None = None,
    *,
    worker_timeout_s: float | None = None,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Run the broker ``settings`` describe until ``stop`` is set, then drain and return.

    Args:
        settings: the broker's settings (:meth:`BrokerSettings.from_deployment`); ``settings.broker`` gives ports
            and ``queue_max``.
        stop: set it to shut down; the broker then answers queued ROIs with Drop ``shutdown``, waits up to
            ``drain_timeout_s`` for in-flight results, answers the rest with Drop ``shutdown`` and returns.
        report: called about once a second, and once at the end with ``final=True``, with a dict
            ``{"component": "broker", "name", "final", "received", "forwarded", "results", "worker_drops",
            "drops": {reason: n}, "malformed", "redispatched", "workers", "queued", "in_flight"}``.
        worker_timeout_s: a worker silent for longer is declared lost, seconds (default:
            :attr:`BrokerSettings.worker_timeout_s`, ``heartbeat.liveness * heartbeat.interval_s``).
        drain_timeout_s: shutdown wait for in-flight results, seconds.

    Raises:
        vcascade.core.telemetry.metrics.MetricsPortInUse: the metrics port is taken.
        zmq.ZMQError: a frontend/backend port cannot be bound.
    """
    cfg, name = settings.broker, settings.name
    serve_metrics(cfg.metrics_port, component="broker", name=name, settings=settings.metrics, host_names=[cfg.host])
    ctx = zmq.Context.instance()  # the process's one context, shared with anything else in the process
    auth = start_authenticator(ctx, settings.security)  # CurveZMQ: the authorized keys, admitted per role
    frontend, backend = broker_sockets(ctx, settings, auth)
    beat = settings.heartbeat
    window_s = settings.worker_timeout_s if worker_timeout_s is None else worker_timeout_s
    try:
        frontend.bind(cfg.endpoint("frontend", bind=True))
        backend.bind(cfg.endpoint("backend", bind=True))
        log.info("broker %s: edges on %s, workers on %s", name, cfg.endpoint("frontend"), cfg.endpoint("backend"))
        bounds = ByteBounds(cfg.queue_max_bytes, cfg.recognizer_queue_max_bytes, cfg.edge_queue_max_bytes)
        dispatcher = Dispatcher(
            cfg.queue_max, cfg.max_workers, cfg.max_attempts, window_s, bounds, answer_timeout_s=cfg.answer_timeout_s,
            no_worker_wait_s=cfg.no_worker_wait_s,
        )
        READINESS.set(f"broker:{name}:bound", True)
        READINESS.add_check(f"broker:{name}:workers", lambda: (dispatcher.workers > 0, "no worker registered"))
        loop = BrokerLoop(name, frontend, backend, dispatcher, beat, report)
        loop.serve(stop)
        loop.shutdown(drain_timeout_s)
    finally:
        READINESS.remove(f"broker:{name}:")
        frontend.close()
        backend.close()
        if auth is not None:
            auth.stop()


class BrokerLoop:
    """State and handlers of one running broker; all calls come from the one thread running :meth:`serve`.

    Public for the benchmark that times its handlers step by step (``tools/bench_broker_steps.py``); a broker is
    run by :func:`run_broker`, which binds the sockets and builds the dispatcher first.
    """

    def __init__(
        self,
        name: str,
        frontend: zmq.Socket,
        backend: zmq.Socket,
        dispatcher: Dispatcher,
        heartbeat: HeartbeatConfig,
        report: Callable[[dict], None] | None,
    ) -> None:
        self.name = name
        self.frontend, self.backend = frontend, backend
        self.dispatcher = dispatcher
        self.heartbeat_interval_s = heartbeat.interval_s
        self.edges: PeerLiveness[bytes] = PeerLiveness(heartbeat.liveness * heartbeat.interval_s, MAX_EDGES)
        self._heartbeat = wire.encode(wire.Heartbeat(sender=name))
        self.backlog = QueueBacklog()  # announced to edges in heartbeats (edge/selection/degrade.py)
        self._last_heartbeat_s = 0.0
        self.report = report
        self.telemetry = BrokerTelemetry(name)
        self.worker_names: dict[bytes, str] = {}
        self.accepting = True
        self._poll_items = [(backend, zmq.POLLIN), (frontend, zmq.POLLIN)]  # zmq.zmq_poll's items: what Poller keeps
        self._last_report_s = self._last_housekeeping_s = time.perf_counter()

    # ------------------------------------------------------------------ main loop

    def serve(self, stop: StopFlag) -> None:
        """Poll, handle, dispatch and keep house until ``stop`` is set."""
        while not stop.is_set():
            self._poll_round(POLL_MS)
            self._dispatch()
            self._housekeeping()

    def shutdown(self, drain_timeout_s: float) -> None:
        """Answer queued ROIs, wait for in-flight ones up to ``drain_timeout_s`` s, answer the rest, report."""
        self.accepting = False
        for item in self.dispatcher.drain():
            self._drop_to_edge(item, "shutdown")
        deadline_s = time.perf_counter() + drain_timeout_s
        while self.dispatcher.in_flight and time.perf_counter() < deadline_s:
            self._poll_round(min(POLL_MS, max(1, int((deadline_s - time.perf_counter()) * 1000))))
            self._expire_workers(time.perf_counter())
            self._beat_if_due(time.perf_counter())  # a gone worker is noticed at once, not after the drain
            self.telemetry.publish()
        for flight in self.dispatcher.drain_in_flight():
            self._drop_to_edge(flight.pending, "shutdown")
        self.telemetry.publish()
        self._update_gauges()
        self._emit_report(final=True)

    def _poll_round(self, timeout_ms: int) -> None:
        for sock, _ in zmq.zmq_poll(self._poll_items, timeout_ms):  # the backend first: answers free credit
            handle = self._on_backend if sock is self.backend else self._on_frontend
            for frames in waiting_messages(sock, copy=False):  # RECV_BATCH at most: neither side starves
                handle(frames)

    def _housekeeping(self) -> None:
        """Every ``POLL_MS`` at most: expire silent workers, take back overdue ROIs, drop stale ROIs and ROIs that
        waited too long for an absent recognizer (``no_worker``), publish the counts, report every second."""
        now_s = time.perf_counter()
        if now_s - self._last_housekeeping_s < POLL_MS / 1000.0:
            return  # the stale sweep is O(queued): not once per message
        self._last_housekeeping_s = now_s
        self._expire_workers(now_s)
        for worker, flights in self.dispatcher.overdue(now_s):
            self.telemetry.overdue(len(flights))
            self._take_back(self.worker_names.get(worker, "other"), flights, "held ROIs past the answer deadline")
        for item in self.dispatcher.stale(now_s):
            self._drop_to_edge(item, "stale")
        for item in self.dispatcher.stranded(now_s):
            self._drop_to_edge(item, "no_worker")
        self._beat_if_due(now_s)
        self.telemetry.publish()  # what was counted since the last tick
        if now_s - self._last_report_s >= REPORT_EVERY_S:
            self._last_report_s = now_s
            self._update_gauges()
            self._emit_report(final=False)

    # ------------------------------------------------------------------ frontend (edges)

    def _on_frontend(self, frames: list[zmq.Frame]) -> None:
        header = self._decode(frames, "frontend")
        if header is None:
            return
        edge, now_s = frames[0].bytes, time.perf_counter()
        if isinstance(header, wire.Bye):
            self.edges.forget(edge)  # its ROIs are still answered: answers route by the id they carry
            return
        self.edges.heard(edge, now_s)  # any message proves the edge alive
        if isinstance(header, wire.Heartbeat):
            return
        if not isinstance(header, wire.Roi):
            self._malformed("frontend", "wrong_kind")
            return
        self.telemetry.roi_received(header.camera)
        envelope = Envelope(edge, frames[1:], header)
        size_bytes = len(frames[1]) + len(frames[2])  # header and crop as received (an Roi has one payload frame)
        item = Pending(header.roi_id, header.camera, now_s, header.ttl_ms, envelope, recognizer=header.recognizer,
                       size_bytes=size_bytes, edge=edge,
                       deferrable=header.send_reason in wire.DEFERRABLE_SEND_REASONS)  # fmt: skip
        if not self.accepting:
            self._drop_to_edge(item, "shutdown")
        elif header.roi_id in self.dispatcher:
            # the first copy is still queued or in flight and will be answered: one answer per roi_id
            self._count_drop("duplicate_roi")
        elif (flight := self.dispatcher.hand_off(item, now_s)) is not None:
            self._send_worker(flight)  # nothing queued could go before it: no enqueue, no dequeue
        else:
            for dropped in self.dispatcher.enqueue(item):
                self._drop_to_edge(dropped, "queue_full")

    # ------------------------------------------------------------------ backend (workers)

    def _on_backend(self, frames: list[zmq.Frame]) -> None:
        header = self._decode(frames, "backend")
        if header is None:
            return
        worker, now_s = frames[0].bytes, time.perf_counter()
        self.dispatcher.worker_seen(worker, now_s)  # any message proves a registered worker alive
        if isinstance(header, wire.Result):  # the usual message first
            self._on_result(worker, header, now_s)
        elif isinstance(header, wire.Ready):
            self._on_ready(worker, header, now_s)
        elif isinstance(header, wire.Drop):
            self._on_worker_drop(worker, header, frames[1], now_s)
        elif isinstance(header, wire.Bye):
            self._worker_lost(worker, "bye")
        elif not isinstance(header, wire.Heartbeat):  # a Heartbeat needs nothing more than worker_seen
            self._malformed("backend", "wrong_kind")

    def _on_ready(self, worker: bytes, ready: wire.Ready, now_s: float) -> None:
        if not 0 <= ready.credits <= MAX_CREDITS:
            self._malformed("backend", "bad_credits")
            return
        for evicted, flights in self.dispatcher.make_room(worker):  # at max_workers: the least useful one goes
            self.telemetry.worker_evicted()
            self._forget(evicted, flights, "evicted for a new worker")
        try:
            is_new = self.dispatcher.worker_ready(worker, ready.credits, now_s, ready.recognizer,
                                                  finite_ms(ready.start_delay_ms) / 1000.0)  # fmt: skip
        except (WorkerLimit, RecognizerChanged) as exc:
            self._malformed("backend", "worker_limit" if isinstance(exc, WorkerLimit) else "recognizer_changed")
            return
        name = self.telemetry.worker_label(ready.worker)  # the peer's name, bounded: metric label and log
        if is_new:
            log.info("broker %s: worker %s (recognizer %s) joined with %d credits",
                     self.name, name, self.telemetry.recognizer_label(ready.recognizer), ready.credits)  # fmt: skip
        old_name = self.worker_names.get(worker)
        if old_name is not None and old_name != name:
            self.telemetry.forget_worker(old_name)
        self.worker_names[worker] = name
        self.telemetry.set_credits(name, ready.credits)

    def _on_result(self, worker: bytes, result: wire.Result, now_s: float) -> None:
        flight = self._complete(result.roi_id, worker)
        if flight is None:
            return
        hops = result.hops  # the decoded header's own list: appended in place, not copied into a new Result (whose
        hops.extend(broker_hops(flight, hops, now_s))  # __post_init__ would check the worker's name again)
        hops.append(("broker_return", ms(time.perf_counter() - now_s)))
        if self._send_edge(flight.pending.data.edge, [wire.encode(result)]):
            self.telemetry.result_forwarded()

    def _on_worker_drop(self, worker: bytes, drop: wire.Drop, header_frame: zmq.Frame, now_s: float) -> None:
        flight = self._complete(drop.roi_id, worker)
        if flight is None:
            return
        if self._send_edge(flight.pending.data.edge, [header_frame]):  # forwarded unchanged
            self.telemetry.worker_drop_forwarded()

    def _complete(self, roi_id: str, worker: bytes) -> InFlight | None:
        """The in-flight record an answer completes; None (counted) for a late, duplicate or unknown answer."""
        flight = self.dispatcher.complete(roi_id, worker)
        if flight is None:
            late = self.dispatcher.was_taken_from(roi_id, worker)
            self._count_drop("late_result" if late else "unknown_roi")
        return flight

    # ------------------------------------------------------------------ dispatch and workers

    def _dispatch(self) -> None:
        """Hand queued ROIs to workers while some worker has credit."""
        while self.accepting:
            now_s = time.perf_counter()
            flight, stale = self.dispatcher.next_dispatch(now_s)
            for item in stale:
                self._drop_to_edge(item, "stale")
            if flight is None:
                return
            self._send_worker(flight)

    def _send_worker(self, flight: InFlight) -> None:
        envelope: Envelope = flight.pending.data
        frames = [flight.worker, *envelope.frames]
        if envelope.roi.ttl_ms > 0 and flight.dispatched_s > flight.pending.received_s:  # the deadline less the wait
            frames[1] = wire.encode(msgspec.structs.replace(envelope.roi, ttl_ms=remaining_ttl_ms(flight)))
        try:
            send_frames(self.backend, frames)
        except zmq.ZMQError as exc:  # EHOSTUNREACH: disconnected; EAGAIN: its pipe is full, it is not reading
            log.warning("broker %s: worker %r unreachable (%s)", self.name, flight.worker, exc.strerror)
            self.telemetry.send_failed("backend", send_failure_reason(exc))
            flight.pending.attempts -= 1  # never delivered: not an attempt
            self._worker_lost(flight.worker, "unreachable")
            return
        self.telemetry.dispatched(flight.pending.recognizer, flight.dispatched_s - flight.pending.received_s)
        self.backlog.waited(flight.dispatched_s - flight.pending.received_s)

    def _expire_workers(self, now_s: float) -> None:
        for worker, flights in self.dispatcher.expire_workers(now_s):
            self._forget(worker, flights, "silent")

    def _worker_lost(self, worker: bytes, why: str) -> None:
        if self.dispatcher.credits(worker) is None:
            return  # never registered (or already lost): nothing to answer
        self._forget(worker, self.dispatcher.worker_gone(worker), why)

    def _forget(self, worker: bytes, flights: list[InFlight], why: str) -> None:
        """A worker is gone: re-queue its ROIs (bounded attempts; none while shutting down), drop the rest."""
        name = self.worker_names.pop(worker, "other")
        self.telemetry.forget_worker(name)
        self._take_back(name, flights, f"lost ({why})")

    def _take_back(self, name: str, flights: list[InFlight], why: str) -> None:
        """ROIs taken from worker ``name`` (lost, evicted or overdue): re-queue them (bounded attempts; none while
        shutting down), drop the rest as ``worker_lost``."""
        if self.accepting:
            given_up, overflow = self.dispatcher.requeue(flights)
        else:
            given_up, overflow = [flight.pending for flight in flights], []
        redispatched = len(flights) - len(given_up)
        self.telemetry.redispatched(redispatched)
        log.info(
            "broker %s: worker %s %s: %d ROIs taken back, %d re-queued, %d dropped",
            self.name, name, why, len(flights), redispatched, len(given_up),
        )  # fmt: skip
        for item in given_up:
            self._drop_to_edge(item, "worker_lost")
        for item in overflow:
            self._drop_to_edge(item, "queue_full")

    def _beat_if_due(self, now_s: float) -> None:
        """Every ``interval_s``: one Heartbeat to every registered worker and every edge heard from within the
        liveness window; a peer found gone on the way is forgotten (a worker's ROIs re-queued)."""
        if now_s - self._last_heartbeat_s < self.heartbeat_interval_s:
            return
        self._last_heartbeat_s = now_s
        for worker in list(self.worker_names):
            if not self._send_heartbeat(self.backend, "backend", worker):
                self._worker_lost(worker, "unreachable")
        self.edges.expired(now_s)  # silent edges are no longer heartbeated
        backlog_ms = self.backlog.backlog_ms(self.dispatcher.queued)
        to_edges = wire.encode(wire.Heartbeat(sender=self.name, backlog_ms=backlog_ms)) if backlog_ms else None
        for edge in self.edges:
            if not self._send_heartbeat(self.frontend, "frontend", edge, to_edges):
                self.edges.forget(edge)

    def _send_heartbeat(self, sock: zmq.Socket, side: str, peer: bytes, frame: bytes | None = None) -> bool:
        """Send one Heartbeat (``frame``, default the plain one); False when the peer is gone (a full pipe is
        counted but not fatal)."""
        try:
            send_frames(sock, [peer, frame or self._heartbeat])
        except zmq.ZMQError as exc:
            self.telemetry.send_failed(side, send_failure_reason(exc))
            return exc.errno != errno.EHOSTUNREACH
        return True

    # ------------------------------------------------------------------ answers to edges, counting

    def _drop_to_edge(self, item: Pending, reason: str) -> None:
        """Give up on an ROI: count it under ``reason`` and tell its edge with a Drop. An ROI that waited for a
        recognizer no registered worker runs is dropped as ``no_worker`` instead of ``stale``/``queue_full``."""
        reason = self.dispatcher.give_up_reason(item, reason)
        if reason == "stale":  # it waited its whole deadline here: part of the backlog edges are told
            self.backlog.waited(time.perf_counter() - item.received_s)
        self._count_drop(reason)
        drop = wire.Drop(roi_id=item.roi_id, reason=reason, where=self.name)
        self._send_edge(item.data.edge, [wire.encode(drop)])

    def _send_edge(self, edge: bytes, frames: list) -> bool:
        try:
            send_frames(self.frontend, [edge, *frames])
        except zmq.ZMQError as exc:
            self.telemetry.send_failed("frontend", send_failure_reason(exc))
            self._count_drop("edge_gone" if exc.errno == errno.EHOSTUNREACH else "edge_busy")
            return False
        return True

    def _decode(self, frames: list[zmq.Frame], side: str) -> wire.Message | None:
        try:  # the frames as they are (buffers): only the header frame is read, no view made of the others
            _, header, _ = wire.split_message(frames, n_routing=1)
        except wire.MalformedMessage as exc:
            self._malformed(side, exc.reason)
            return None
        return header

    def _malformed(self, side: str, reason: str) -> None:
        self.telemetry.malformed(side, reason)

    def _count_drop(self, reason: str) -> None:
        self.telemetry.dropped(reason)

    # ------------------------------------------------------------------ reporting

    def _update_gauges(self) -> None:
        d = self.dispatcher
        self.telemetry.occupancy(queued=d.queued, in_flight=d.in_flight, workers=d.workers, edges=len(self.edges),
                                 queued_bytes=d.queued_bytes)  # fmt: skip
        self.telemetry.set_recognizer_gauges(d.queued_by_recognizer(), d.workers_by_recognizer())

    def _emit_report(self, final: bool) -> None:
        if self.report is None:
            return
        d = self.dispatcher
        counts = self.telemetry.counts
        report = counts.report(self.name, final, workers=d.workers, queued=d.queued, in_flight=d.in_flight)
        try:
            self.report(report)
        except Exception:  # a failing observer must not take the broker down
            log.exception("broker %s: report callback failed", self.name)

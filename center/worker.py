"""The center worker process: broker sockets, micro-batcher, pipeline stages, recognition head.

Threads (see DESIGN.md, "Stage engine"):

* IO thread (the caller of :func:`run_worker`): owns every ZeroMQ socket and never computes. Receives ROIs
  from the brokers' backends (one DEALER per broker), sends ``Ready`` (credits; doubles as the worker's
  heartbeat) every ``heartbeat.interval_s``, forwards the results the other threads hand it through
  :class:`vcascade.center.outbox.Outbox`. A broker silent for ``heartbeat.liveness * interval_s`` (it heartbeats every
  interval) gets a fresh DEALER with the same identity and a new ``Ready`` (Paranoid Pirate reconnect, ZeroMQ
  Guide ch. 4); work in progress is kept and answered through the new socket.
* batcher thread: micro-batches on "full or timeout", drops stale ROIs, decodes and normalises crops.
* one thread per stage, then the head thread (:class:`vcascade.center.stages.engine.StageEngine`).

Every ROI received is answered exactly once, with a ``Result`` or a ``Drop(reason)``, through the socket it
came from (or its replacement). Reasons: ``stale``, ``decode_error``, ``preprocess_error``, ``stage_error``,
``head_error``, ``overload`` (batcher inbox full: the broker sent beyond our credits), ``shutdown`` (arrived
while draining). An answer ZeroMQ refuses to queue (the broker's pipe at its high-water mark) is counted in
``vcascade_worker_send_failures_total``; the broker then re-dispatches that ROI when it declares us lost.

Deadline: an ROI whose ``ttl_ms`` (what the broker passes on: the edge's deadline less the time already spent
in the broker's queue) will have elapsed, counted from its receipt by the IO thread, when its micro-batch is
expected to start the first stage (close time plus :class:`vcascade.center.intake.microbatch.StartEstimate`'s wait
behind the micro-batches ahead) is dropped as ``stale`` before any decode or compute.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import replace
from typing import Callable

import zmq

from vcascade.center.heads import build_head, head_context, head_input
from vcascade.center.metrics import WorkerTelemetry
from vcascade.center.intake.microbatch import STOP, MicroBatch, MicroBatcher, RoiItem, StartEstimate
from vcascade.center.outbox import Outbox
from vcascade.center.intake.preprocess import PreprocessSpec, prepare_micro_batch, split_stale
from vcascade.center.stages.runtimes import input_device, load_recognizer_stages, warm_up, with_stage_threads
from vcascade.center.stage_group import load_stage_range
from vcascade.center.stages.link import RemoteStages
from vcascade.center.stages.engine import StageEngine
from vcascade.core.protocol import wire
from vcascade.core.schema.center import StageGroupConfig
from vcascade.core.schema.center_settings import WorkerSettings
from vcascade.core.telemetry.health import READINESS
from vcascade.core.transport.liveness import PeerLiveness
from vcascade.core.transport.security import secure_client, watch_auth_failures
from vcascade.core.transport.sockets import make_socket, waiting_messages
from vcascade.core.runtime.stop import StopFlag
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.core.runtime.threads import set_process_threads, stage_threads_of

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0
"""Period of the ``report`` snapshot, s."""
POLL_MS = 50
"""IO thread poll timeout, ms: bounds how late a stop or a periodic message can be."""
MAX_RECONNECT_WAIT_S = 30.0
"""Longest wait between two reconnects to a silent broker, s: the wait starts at the liveness window and doubles
after each attempt (Paranoid Pirate's back-off, ZeroMQ Guide ch. 4), and is reset by any message."""
DRAIN_TIMEOUT_S = 5.0
"""On stop, time allowed for the micro-batches in flight to finish, s."""



def run_worker(
    settings: WorkerSettings, stop: StopFlag, report: Callable[[dict], None] | None = None,
    model_dir: str | None = None,
) -> None:
    """Run the worker ``settings`` describe until ``stop`` is set, then drain and return.

    Blocks. Splits the recognizer (a few seconds), serves metrics on ``metrics_port``, then serves ROIs. On
    stop: finishes the micro-batches in flight and sends their results (at most ``DRAIN_TIMEOUT_S``), sends
    ``Bye`` to every broker and closes its sockets.

    Args:
        settings: the worker's settings (:meth:`WorkerSettings.from_deployment`): its section, recognizer,
            brokers' endpoints and stage group.
        stop: set it to stop the worker.
        report: called about once a second and once at the end with
            :meth:`vcascade.center.metrics.WorkerTelemetry.snapshot` (``final`` True the last time).
        model_dir: folder searched first for an ONNX recognizer's ``model`` name (``--model-dir``).

    Raises:
        vcascade.core.telemetry.metrics.MetricsPortInUse; model build errors
        (see :func:`vcascade.center.stages.torch_stages.build_model`).
    """
    cfg, name = settings.worker, settings.name
    serve_metrics(cfg.metrics_port, component="worker", name=name, settings=settings.metrics)
    worker = _Worker(settings, model_dir)
    worker.telemetry.set_credits(cfg.credits)
    READINESS.set(f"worker:{name}:stages", True)  # _Worker loaded them
    READINESS.add_check(f"worker:{name}:brokers", worker.brokers_alive)
    try:
        worker.run(stop, report or (lambda snapshot: None))
    finally:
        READINESS.remove(f"worker:{name}:")


class _Worker:
    """State shared by the worker's threads; see the module docstring for who runs what."""

    def __init__(self, settings: WorkerSettings, model_dir: str | None = None) -> None:
        cfg, name = settings.worker, settings.name
        threads = stage_threads_of(cfg)  # per stage thread, from the cores given (vcascade.core.runtime.threads)
        set_process_threads(threads, cfg.opencv_threads)  # before the model is built
        recognizer = with_stage_threads(settings.recognizer, threads)
        self.name = name
        self.cfg = cfg
        self.endpoints = list(settings.broker_endpoints)
        self.broker_names = list(cfg.brokers)
        self.security = settings.security
        self.ready_interval_s = settings.heartbeat.interval_s
        self.liveness_s = settings.liveness_s
        self.identity = f"{name}-{socket.gethostname()}-{os.getpid()}"  # replicas of one name (containers: pid 1)
        self.broker_liveness = PeerLiveness(self.liveness_s, len(self.endpoints))  # broker index: last message
        self.connected_s = [0.0] * len(self.endpoints)  # per broker socket: its (re)connect, time.monotonic()
        self.reconnect_wait_s = [self.liveness_s] * len(self.endpoints)  # per broker socket, back-off
        self.telemetry = WorkerTelemetry(name)
        self.spec = PreprocessSpec.from_config(recognizer)
        self.first_device = cfg.devices[0]
        self.input_device = input_device(recognizer, self.first_device)  # where the batcher prepares its input
        self.recognizer = recognizer
        if cfg.downstream is None:  # stages first: they find (or fetch) the model file the head may read
            local = stages = load_recognizer_stages(recognizer, cfg.devices, model_dir=model_dir)
        else:  # the first stages here, the rest in the stage group (one asynchronous stage of the engine)
            local = load_stage_range(recognizer, cfg.devices, 0, model_dir)
            stages = [*local, self._remote_stages(settings.downstream)]
        largest = min(cfg.max_batch, cfg.credits * len(cfg.brokers))  # no micro-batch holds more ROIs
        warm_s = warm_up(local, recognizer, self.first_device, largest, last=cfg.downstream is None)  # memory plateau
        log.info("worker %s: warm-up micro-batch of %d in %.0f ms", name, largest, warm_s * 1e3)
        context = replace(head_context(recognizer, model_dir), recognizer=cfg.recognizer, worker=name)
        self.head = build_head(recognizer.head, context)
        self.admission = StartEstimate()  # when a micro-batch closed now would start stage 0 (center/intake/microbatch.py)
        self.engine = StageEngine(
            stages, cfg.stage_queue, self._emit_results, self._fail_batch, self._stage_computed,
            max_in_flight=cfg.max_batches_in_flight, threads_per_stage=threads,
        )
        self.batcher = MicroBatcher(cfg.max_batch, cfg.max_wait_ms)
        # credits are per broker: ROIs within them, from all brokers at once, must never find the inbox full
        self.inbox: queue.Queue = queue.Queue(maxsize=2 * cfg.credits * len(cfg.brokers))
        self.outbox: Outbox | None = None
        self._seq = 0

    def brokers_alive(self) -> tuple[bool, str]:
        """Readiness: at least one broker sent a message within the heartbeat liveness window (any thread)."""
        now = time.monotonic()
        alive = any(self.broker_liveness.alive(index, now) for index in range(len(self.endpoints)))
        return alive, "" if alive else f"no broker heard within {self.liveness_s:g} s"

    def _remote_stages(self, group: StageGroupConfig) -> RemoteStages:
        """The downstream stage group as an async stage (CurveZMQ client of the group when enabled)."""
        group_name = self.cfg.downstream
        return RemoteStages(
            zmq.Context.instance(), group.endpoint(), len(group.devices), group.timeout_s,
            secure=lambda sock: secure_client(sock, self.security, self.name, group_name),
            on_discard=self.telemetry.link_discarded,
        )

    # ------------------------------------------------------------------ IO thread

    def run(self, stop: StopFlag, report: Callable[[dict], None]) -> None:
        """IO loop until ``stop``, then drain, say Bye and close."""
        ctx = zmq.Context.instance()  # the process's one context
        self.outbox = Outbox(ctx)
        dealers = [self._connect(ctx, index) for index in range(len(self.endpoints))]
        poller = zmq.Poller()
        for sock in [*dealers, self.outbox.pull]:
            poller.register(sock, zmq.POLLIN)
        batcher_thread = threading.Thread(target=self._batcher_loop, name="batcher", daemon=True)
        self.engine.start()
        batcher_thread.start()
        log.info("worker %s serving %s", self.name, self.endpoints)
        try:
            self._serve(stop, dealers, poller, report)
            self._drain(dealers, poller, batcher_thread)
        finally:
            self._close(dealers)
            self.head.close()  # after the drain: the embedding head pushes its last identities to the store
            report(self.telemetry.snapshot(final=True))

    def _connect(self, ctx: zmq.Context, index: int) -> zmq.Socket:
        """A DEALER to broker ``index`` (CurveZMQ client pinned to that broker's key when curve is enabled); the
        reconnect back-off counts from now."""
        self.connected_s[index] = time.monotonic()
        sock = make_socket(ctx, zmq.DEALER, identity=self.identity)
        secure_client(sock, self.security, self.name, self.broker_names[index])
        if self.security.curve.enabled:
            watch_auth_failures(sock, "worker", self.name)
        sock.connect(self.endpoints[index])
        return sock

    def _ready(self) -> wire.Ready:
        return wire.Ready(worker=self.name, credits=self.cfg.credits, recognizer=self.cfg.recognizer,
                          start_delay_ms=self.admission.start_delay_ms())  # fmt: skip

    def _serve(self, stop: StopFlag, dealers: list[zmq.Socket], poller: zmq.Poller, report) -> None:
        next_ready = next_report = 0.0
        while not stop.is_set():
            self._poll_once(dealers, poller, accept=True)
            now = time.monotonic()
            self._reconnect_silent(dealers, poller, now)
            if now >= next_ready:
                self._send_all(dealers, self._ready())
                next_ready = now + self.ready_interval_s
            if now >= next_report:
                report(self.telemetry.snapshot(final=False))
                next_report = now + REPORT_INTERVAL_S
            self.telemetry.queue_depths({"batcher": self.inbox.qsize(), **self.engine.queue_depths()})

    def _reconnect_silent(self, dealers: list[zmq.Socket], poller: zmq.Poller, now: float) -> None:
        """Replace the DEALER of every broker silent for the liveness window, then announce us on it; while it
        stays silent, the next attempt comes ``reconnect_wait_s`` (doubled each time) after the last one."""
        for index in range(len(dealers)):
            wait_s = self.reconnect_wait_s[index]
            if self.broker_liveness.alive(index, now) or now - self.connected_s[index] <= wait_s:
                continue
            quiet_since_s = max(self.connected_s[index], self.broker_liveness.last_heard_s(index) or 0.0)
            level = logging.WARNING if wait_s == self.liveness_s else logging.DEBUG  # once per outage
            log.log(level, "worker %s: broker %s silent for %.1f s, reconnecting", self.name,
                    self.endpoints[index], now - quiet_since_s)  # fmt: skip
            self.reconnect_wait_s[index] = min(MAX_RECONNECT_WAIT_S, 2 * wait_s)
            poller.unregister(dealers[index])
            dealers[index].close()  # LINGER bounds what is still queued for the dead link
            dealers[index] = self._connect(zmq.Context.instance(), index)  # the next attempt counts from here
            poller.register(dealers[index], zmq.POLLIN)
            self.telemetry.reconnected()
            self._send(dealers[index], wire.encode(self._ready()))

    def _drain(self, dealers: list[zmq.Socket], poller: zmq.Poller, batcher_thread: threading.Thread) -> None:
        """Finish the work in flight while still forwarding results; ROIs arriving now are dropped (shutdown)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        try:
            self.inbox.put(STOP, timeout=DRAIN_TIMEOUT_S)  # behind every ROI received; the batcher stops the engine
        except queue.Full:
            log.warning("worker %s: batcher inbox still full at stop", self.name)
        while batcher_thread.is_alive() and time.monotonic() < deadline:
            self._poll_once(dealers, poller, accept=False)
        batcher_thread.join(max(0.0, deadline - time.monotonic()))
        quiet_deadline = time.monotonic() + 1.0  # results the last threads queued just before ending
        while self.outbox.pull.poll(POLL_MS) and time.monotonic() < quiet_deadline:
            self._poll_once(dealers, poller, accept=False)
        if batcher_thread.is_alive():
            log.warning("worker %s: micro-batches still running after %.1f s drain", self.name, DRAIN_TIMEOUT_S)

    def _close(self, dealers: list[zmq.Socket]) -> None:
        self._send_all(dealers, wire.Bye(sender=self.name))
        for sock in dealers:
            sock.close()  # LINGER (vcascade.core.transport.sockets) bounds the wait for unsent messages
        if self.outbox is not None:
            self.outbox.close()

    def _poll_once(self, dealers: list[zmq.Socket], poller: zmq.Poller, accept: bool) -> None:
        events = dict(poller.poll(POLL_MS))
        for index, sock in enumerate(dealers):
            if sock in events:
                self._receive_all(index, sock, accept)
        for broker, header in self.outbox.waiting():
            self._send(dealers[broker], header)

    def _receive_all(self, broker: int, sock: zmq.Socket, accept: bool) -> None:
        for frames in waiting_messages(sock):  # RECV_BATCH at most: a flood cannot starve Ready and results
            self._on_message(broker, frames, accept, sock)

    def _on_message(self, broker: int, frames: list[bytes], accept: bool, sock: zmq.Socket) -> None:
        received = time.perf_counter()
        self.broker_liveness.heard(broker, time.monotonic())  # any message proves the broker alive
        self.reconnect_wait_s[broker] = self.liveness_s  # and resets the reconnect back-off
        try:
            _, header, payload = wire.split_message(frames, 0)
        except wire.MalformedMessage as exc:
            self.telemetry.malformed(exc.reason)
            return
        if isinstance(header, wire.Heartbeat):
            return  # liveness only: recorded above
        if not isinstance(header, wire.Roi):
            self.telemetry.malformed("unexpected_kind")
            return
        self.telemetry.roi_received()
        item = RoiItem(header, payload[0], broker, received)
        if not accept:
            self._drop_now(sock, item, "shutdown")
            return
        try:
            self.inbox.put_nowait(item)
        except queue.Full:
            self._drop_now(sock, item, "overload")

    def _drop_now(self, sock: zmq.Socket, item: RoiItem, reason: str) -> None:
        self._send(sock, wire.encode(wire.Drop(roi_id=item.roi.roi_id, reason=reason, where=self.name)))
        self.telemetry.dropped(reason)

    def _send_all(self, dealers: list[zmq.Socket], header: wire.Message) -> None:
        frame = wire.encode(header)
        for sock in dealers:
            self._send(sock, frame)

    def _send(self, sock: zmq.Socket, frame: bytes) -> None:
        try:
            sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:  # high-water mark reached: the broker is gone or far behind
            self.telemetry.send_failed("hwm")

    # ------------------------------------------------------------------ batcher thread

    def _batcher_loop(self) -> None:
        stopped = False
        while not stopped:
            items, stopped = self.batcher.collect(self.inbox, idle_timeout_s=0.1)
            if items:
                self._close_batch(items)
        self.engine.stop(DRAIN_TIMEOUT_S)

    def _close_batch(self, items: list[RoiItem]) -> None:
        t_closed = time.perf_counter()
        starts_s = t_closed + self.admission.start_delay_ms() / 1000.0  # after the micro-batches ahead
        items, unstartable = split_stale(items, starts_s)  # would start compute past their deadline
        self._drop_items(unstartable, "stale")
        if not items:
            return
        prepared = prepare_micro_batch(items, self.spec, self.input_device, t_closed)
        if prepared.error is not None:
            log.error("worker %s: preprocess failed", self.name, exc_info=prepared.error)
        for reason, dropped in prepared.dropped.items():
            self._drop_items(dropped, reason)
        if prepared.batch is None:
            return
        batch = MicroBatch(self._seq, prepared.items, (prepared.batch,), t_closed, time.perf_counter())
        self._seq += 1
        self.telemetry.batch_computed(len(batch.items))
        self.admission.submitted()
        self.engine.submit(batch)  # blocks while stage 0's queue is full: back-pressure

    def _stage_computed(self, index: int, seconds: float) -> None:
        """Engine callback (stage threads): a stage computed a micro-batch in ``seconds``."""
        self.telemetry.stage_computed(index, seconds)
        if index == 0:
            self.admission.first_stage_done(seconds)

    # ------------------------------------------------------------------ stage / head threads

    def _emit_results(self, batch: MicroBatch) -> None:
        """Engine sink (head thread): last stage's output -> the configured head -> one Result per ROI."""
        rois = [item.roi for item in batch.items]
        outputs = self.head(head_input(batch.data[0], len(batch.items), self.head.input_ndim), rois)
        t_done = time.perf_counter()
        for row, (item, output) in enumerate(zip(batch.items, outputs)):
            hops = batch.hops(row, t_done)
            result = wire.Result(roi_id=item.roi.roi_id, worker=self.name, output=output, hops=hops)
            self.outbox.send(item.broker, wire.encode(result))
            self.telemetry.result_sent(hops)

    def _fail_batch(self, batch: MicroBatch, where: str, exc: BaseException) -> None:
        """Engine error callback: every ROI of the failed micro-batch gets a Drop."""
        if where == "stage0":
            self.admission.first_stage_done(None)
        if where != "head":
            self.telemetry.stage_failed(where, getattr(exc, "reason", "exception"))
        self._drop_items(batch.items, "head_error" if where == "head" else "stage_error")

    def _drop_items(self, items: list[RoiItem], reason: str) -> None:
        for item in items:
            drop = wire.Drop(roi_id=item.roi.roi_id, reason=reason, where=self.name)
            self.outbox.send(item.broker, wire.encode(drop))
        if items:
            self.telemetry.dropped(reason, len(items))

"""The stage-group process: some consecutive pipeline stages of a worker's recognizer, served over ZeroMQ.

``vcascade stage-group --config FILE --name NAME`` (or ``vcascade run``, which starts groups before the
workers). Threads:

* IO thread (the caller of :func:`run_stage_group`): owns the ROUTER the workers connect to (CurveZMQ server
  when the deployment enables it, admitting only the keys of the workers whose ``downstream`` is this group)
  and an ``inproc`` PULL for answers; decodes each ``batch`` message
  (:mod:`vcascade.center.stages.link`) into a micro-batch whose items are the sender's routing id and ``seq``, and
  submits it to the engine (blocking when the engine is full: back-pressure through ZeroMQ's queues).
* one thread per stage (:class:`vcascade.center.stages.engine.StageEngine`, torch threads per stage from the config), then the
  sink thread, which encodes the last stage's output as a ``result`` (zero-copy frames) and hands it to the IO
  thread. A stage that raises answers its micro-batch with an ``error`` message; the group keeps serving.

Malformed messages are counted (``vcascade_stage_group_malformed_messages_total{reason}``) and dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Sequence

import zmq

from vcascade.center.metrics import StageGroupTelemetry
from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.stages.runtimes import Stage, load_recognizer_stages, with_stage_threads
from vcascade.center.stages.link import decode_message, encode_message
from vcascade.center.stages.engine import StageEngine
from vcascade.core.protocol.bounded_decode import MalformedMessage
from vcascade.core.schema.center import RecognizerConfig
from vcascade.core.schema.center_settings import StageGroupSettings
from vcascade.core.transport.security import secure_server
from vcascade.core.transport.sockets import make_socket, waiting_messages
from vcascade.core.runtime.stop import StopFlag
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.core.runtime.threads import set_process_threads, stage_threads_of
from vcascade.core.transport.zap import WORKERS, start_authenticator

log = logging.getLogger(__name__)

POLL_MS = 50
"""IO thread poll timeout, ms: bounds how late a stop is seen."""
REPORT_INTERVAL_S = 1.0
"""Period of the ``report`` snapshot, s."""
DRAIN_TIMEOUT_S = 5.0
"""On stop, time allowed for the micro-batches in flight to finish, s."""


def load_stage_range(
    cfg: RecognizerConfig, devices: Sequence[str], first: int, model_dir: str | None = None
) -> list[Stage]:
    """Stages ``first .. first + len(devices) - 1`` of the recognizer, placed on ``devices``.

    The whole model is built and split on the CPU at its explicit ``split_points`` (deterministic: every process
    gets the same stage modules; ``auto`` is refused by the config check, since profiling in two processes could
    choose differently); only the kept stages move to their devices.

    Raises:
        ValueError: ``split_points: auto``, or the range does not fit the recognizer's stages; the errors of
        :func:`vcascade.center.stages.runtimes.load_recognizer_stages`.
    """
    if cfg.split_points == "auto":
        raise ValueError("a recognizer split across processes needs explicit split_points, not auto")
    total = len(cfg.split_points) + 1
    if first < 0 or first + len(devices) > total:
        raise ValueError(f"stages {first}..{first + len(devices) - 1} of a recognizer with {total} stages")
    placed = ["cpu"] * first + list(devices) + ["cpu"] * (total - first - len(devices))
    return load_recognizer_stages(cfg, placed, model_dir=model_dir)[first : first + len(devices)]


def run_stage_group(
    settings: StageGroupSettings, stop: StopFlag, report: Callable[[dict], None] | None = None
) -> None:
    """Run the stage group ``settings`` describe (:meth:`StageGroupSettings.from_deployment`: its section, its
    recognizer and first stage, the workers it admits) until ``stop`` is set, then finish the micro-batches in
    flight and return.

    Raises:
        vcascade.core.telemetry.metrics.MetricsPortInUse; vcascade.core.transport.security.SecurityError;
        model build errors (see :func:`vcascade.center.stages.torch_stages.build_model`).
    """
    cfg, first = settings.group, settings.first_stage
    threads = stage_threads_of(cfg)  # per stage thread, from the cores given (vcascade.core.runtime.threads)
    set_process_threads(threads, opencv_threads=1)
    serve_metrics(cfg.metrics_port, settings=settings.metrics, host_names=[cfg.host])
    stages = load_stage_range(with_stage_threads(settings.recognizer, threads), cfg.devices, first)
    _Group(settings, stages, threads).run(stop, report or (lambda snapshot: None))


class _Group:
    """State shared by the group's threads; see the module docstring for who runs what."""

    def __init__(self, settings: StageGroupSettings, stages: list[Stage], threads: int) -> None:
        self.cfg = settings.group
        self.name = name = settings.name
        self.security = settings.security
        self.workers = list(settings.workers)  # CurveZMQ: only the workers sending here
        self.first = first = settings.first_stage
        self.telemetry = StageGroupTelemetry(name)
        self.engine = StageEngine(
            stages, self.cfg.stage_queue, self._answer, self._fail, self.telemetry.stage_computed,
            threads_per_stage=threads, first_stage_index=first,
        )
        self.ctx = zmq.Context.instance()
        self.pipe = f"inproc://vcascade-stage-group-{name}"
        self._local = threading.local()  # one PUSH per sending thread (sink, and stages on failure)
        self._pushes: list[zmq.Socket] = []

    def run(self, stop: StopFlag, report: Callable[[dict], None]) -> None:
        """Serve until ``stop``, then drain and close."""
        auth = start_authenticator(self.ctx, self.security)
        router = make_socket(self.ctx, zmq.ROUTER)
        pull = make_socket(self.ctx, zmq.PULL)
        try:
            secure_server(router, self.security, self.name)
            if auth is not None:
                auth.admit(router, WORKERS, self.workers)
            router.bind(self.cfg.endpoint(bind=True))
            pull.bind(self.pipe)
            self.engine.start()
            log.info("stage group %s serving stages from %d on %s", self.name, self.first, self.cfg.endpoint())
            self._serve(stop, router, pull, report)
            self._drain(router, pull)
        finally:
            router.close()
            pull.close()
            if auth is not None:
                auth.stop()
            report(self.telemetry.snapshot(final=True))

    def _serve(self, stop: StopFlag, router: zmq.Socket, pull: zmq.Socket, report) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(pull, zmq.POLLIN)
        next_report = 0.0
        while not stop.is_set():
            events = dict(poller.poll(POLL_MS))
            if router in events:
                self._receive_all(router)
            if pull in events:
                _forward_all(pull, router)
            if time.monotonic() >= next_report:
                report(self.telemetry.snapshot(final=False))
                next_report = time.monotonic() + REPORT_INTERVAL_S

    def _drain(self, router: zmq.Socket, pull: zmq.Socket) -> None:
        if not self.engine.stop(DRAIN_TIMEOUT_S):
            log.warning("stage group %s: micro-batches still running after %.1f s", self.name, DRAIN_TIMEOUT_S)
        while pull.poll(100):
            _forward_all(pull, router)
        for push in self._pushes:
            push.close()

    def _receive_all(self, router: zmq.Socket) -> None:
        for frames in waiting_messages(router, copy=False):  # RECV_BATCH at most: answers go out in between
            self._on_message(frames)

    def _on_message(self, frames: list[zmq.Frame]) -> None:
        t_received = time.perf_counter()
        try:
            header, tensors = decode_message(frames[1:])
        except MalformedMessage as exc:  # the only error decoding raises: a fixed reason label
            self.telemetry.malformed(exc.reason)
            return
        if header.kind != "batch":
            self.telemetry.malformed("unexpected_kind")
            return
        batch = MicroBatch(header.seq, [frames[0].bytes], tuple(tensors), t_received, t_received)
        batch.compute_s.extend(header.compute_s)
        self.engine.submit(batch)

    # ------------------------------------------------------------------ stage / sink threads

    def _answer(self, batch: MicroBatch) -> None:
        """Engine sink: the last stage's output back to the worker that sent the micro-batch."""
        self._send([batch.items[0], *encode_message("result", batch.seq, batch.data, batch.compute_s)])
        self.telemetry.answered()

    def _fail(self, batch: MicroBatch, where: str, exc: BaseException) -> None:
        """A stage raised: answer with an ``error`` message (the worker drops those ROIs as ``stage_error``)."""
        message = f"{where}: {type(exc).__name__}"
        self._send([batch.items[0], *encode_message("error", batch.seq, (), batch.compute_s, error=message)])
        self.telemetry.failed(where)

    def _send(self, frames: list) -> None:
        """Hand frames to the IO thread over the inproc pipe (called by the sink thread or a stage thread)."""
        push = getattr(self._local, "push", None)
        if push is None:
            push = self._local.push = make_socket(self.ctx, zmq.PUSH)
            push.connect(self.pipe)
            self._pushes.append(push)
        push.send_multipart(frames, copy=False)


def _forward_all(pull: zmq.Socket, router: zmq.Socket) -> None:
    """Send the queued answers (``RECV_BATCH`` at most) to their workers (a worker gone meanwhile: dropped)."""
    for frames in waiting_messages(pull, copy=False):
        try:
            router.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.ZMQError:  # EHOSTUNREACH (ROUTER_MANDATORY): that worker's connection is gone
            log.debug("answer for a worker no longer connected dropped")

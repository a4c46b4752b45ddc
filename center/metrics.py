"""Worker and stage-group metrics (Prometheus, prefixes ``vcascade_worker_`` with label ``worker`` on all, and
``vcascade_stage_group_`` with label ``group``) and the report snapshots.

The metric objects are module globals registered once in the process's default registry, so several workers
in one process (tests) share them and differ by their ``worker`` label. :class:`WorkerTelemetry` updates them
and, under a lock, the plain counters behind the once-a-second report dict; :class:`StageGroupTelemetry` does
the same for a stage-group process.
"""

from __future__ import annotations

import threading
from collections import Counter as _Tally

from prometheus_client import Counter, Gauge, Histogram

from vcascade.core.transport.security import auth_failures_counter
from vcascade.core.telemetry.metrics import BATCH_BUCKETS, LATENCY_BUCKETS_S
from vcascade.core.protocol.wire import Hop

ROIS_RECEIVED = Counter("vcascade_worker_rois_received_total", "ROIs received from brokers.", ["worker"])
RESULTS = Counter("vcascade_worker_results_total", "Results sent back.", ["worker"])
DROPS = Counter("vcascade_worker_drops_total", "ROIs answered with a Drop, by reason.", ["worker", "reason"])
MALFORMED = Counter(
    "vcascade_worker_malformed_messages_total", "Received messages dropped as malformed, by reason.",
    ["worker", "reason"],
)
BATCH_SIZE = Histogram(
    "vcascade_worker_batch_size", "ROIs per micro-batch computed.", ["worker"], buckets=BATCH_BUCKETS
)
STAGE_SECONDS = Histogram(
    "vcascade_worker_stage_seconds", "Compute time of one stage on one micro-batch, s.", ["worker", "stage"],
    buckets=LATENCY_BUCKETS_S,
)
HOP_SECONDS = Histogram(
    "vcascade_worker_hop_seconds", "Per-ROI latency of each worker hop, s.", ["worker", "hop"],
    buckets=LATENCY_BUCKETS_S,
)
QUEUE_DEPTH = Gauge(
    "vcascade_worker_queue_depth", "Items waiting in each queue (batcher: ROIs, stages: micro-batches).",
    ["worker", "queue"],
)
SEND_FAILURES = Counter(
    "vcascade_worker_send_failures_total", "Headers not sent, by reason (hwm: a broker socket at its high-water mark).",
    ["worker", "reason"],
)
RECONNECTS = Counter(
    "vcascade_worker_reconnects_total",
    "Broker sockets replaced after the broker was silent for the heartbeat liveness window.", ["worker"],
)
IN_FLIGHT = Gauge("vcascade_worker_in_flight", "ROIs received and not yet answered.", ["worker"])
CREDITS = Gauge(
    "vcascade_worker_credits", "Credits this worker announces to each broker (ROIs it may hold in flight).", ["worker"]
)
STAGE_BUSY = Counter(
    "vcascade_worker_stage_busy_seconds_total",
    "Seconds each stage spent computing; its rate is the stage's utilisation (0..1 per stage thread).",
    ["worker", "stage"],
)
STAGE_ERRORS = Counter(
    "vcascade_worker_stage_errors_total",
    "Micro-batches failed by a stage, by stage and reason (exception, stage_unreachable, remote_error).",
    ["worker", "stage", "reason"],
)
LINK_DISCARDED = Counter(
    "vcascade_worker_link_discarded_total",
    "Stage-group answers dropped, by reason (late: its micro-batch had already failed; malformed reasons).",
    ["worker", "reason"],
)
AUTH_FAILURES = auth_failures_counter("worker")
"""``vcascade_worker_auth_failures_total{worker, reason}``: brokers that refused this worker's CurveZMQ
handshake, counted by :class:`vcascade.core.transport.security.AuthFailureMonitor` (declared here so the family is exported
from the start)."""


class WorkerTelemetry:
    """Counts events of one worker into the Prometheus metrics and the report snapshot. Thread-safe."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._rois = 0
        self._results = 0
        self._drops: _Tally[str] = _Tally()
        self._malformed: _Tally[str] = _Tally()
        self._batches = 0
        self._batched_rois = 0
        self._stage_sum_s: _Tally[str] = _Tally()
        self._stage_calls: _Tally[str] = _Tally()
        self._send_failures = 0
        self._reconnects = 0
        IN_FLIGHT.labels(worker).set(0)

    def set_credits(self, credits: int) -> None:
        """Publish the credits this worker announces (``workers.<name>.credits``)."""
        CREDITS.labels(self.worker).set(credits)

    def roi_received(self) -> None:
        """One ROI decoded from a broker socket."""
        ROIS_RECEIVED.labels(self.worker).inc()
        IN_FLIGHT.labels(self.worker).inc()
        with self._lock:
            self._rois += 1

    def result_sent(self, hops: list[Hop]) -> None:
        """One ROI answered with a Result; ``hops`` are its worker hops, ms."""
        RESULTS.labels(self.worker).inc()
        IN_FLIGHT.labels(self.worker).dec()
        for hop, ms in hops:
            HOP_SECONDS.labels(self.worker, hop).observe(ms / 1000.0)
        with self._lock:
            self._results += 1

    def dropped(self, reason: str, count: int = 1) -> None:
        """``count`` received ROIs answered with ``Drop(reason)``."""
        DROPS.labels(self.worker, reason).inc(count)
        IN_FLIGHT.labels(self.worker).dec(count)
        with self._lock:
            self._drops[reason] += count

    def malformed(self, reason: str) -> None:
        """One received message dropped as malformed (``MalformedMessage.reason``)."""
        MALFORMED.labels(self.worker, reason).inc()
        with self._lock:
            self._malformed[reason] += 1

    def send_failed(self, reason: str) -> None:
        """One header could not be queued on a broker socket, for ``reason`` (``hwm``: high-water mark)."""
        SEND_FAILURES.labels(self.worker, reason).inc()
        with self._lock:
            self._send_failures += 1

    def reconnected(self) -> None:
        """One broker socket was replaced after a silent liveness window."""
        RECONNECTS.labels(self.worker).inc()
        with self._lock:
            self._reconnects += 1

    def batch_computed(self, size: int) -> None:
        """A micro-batch of ``size`` ROIs entered the stages."""
        BATCH_SIZE.labels(self.worker).observe(size)
        with self._lock:
            self._batches += 1
            self._batched_rois += size

    def stage_computed(self, index: int, seconds: float) -> None:
        """Stage ``index`` computed one micro-batch in ``seconds`` (compute only, no queue wait)."""
        stage = f"stage{index}"
        STAGE_SECONDS.labels(self.worker, stage).observe(seconds)
        STAGE_BUSY.labels(self.worker, stage).inc(seconds)
        with self._lock:
            self._stage_sum_s[stage] += seconds
            self._stage_calls[stage] += 1

    def stage_failed(self, stage: str, reason: str) -> None:
        """One micro-batch failed in ``stage`` (``stage<k>``) for ``reason``."""
        STAGE_ERRORS.labels(self.worker, stage, reason).inc()

    def link_discarded(self, reason: str) -> None:
        """One stage-group answer dropped for ``reason`` (``late``, or a malformed message's reason)."""
        LINK_DISCARDED.labels(self.worker, reason).inc()

    def queue_depths(self, depths: dict[str, int]) -> None:
        """Set the queue-depth gauges, by queue name (``batcher``, ``stage<k>``, ``head``)."""
        for name, depth in depths.items():
            QUEUE_DEPTH.labels(self.worker, name).set(depth)

    def snapshot(self, final: bool) -> dict:
        """The report dict: counts so far, mean micro-batch size, mean compute ms per stage."""
        with self._lock:
            return {
                "component": "worker",
                "name": self.worker,
                "final": final,
                "rois": self._rois,
                "results": self._results,
                "drops": dict(self._drops),
                "malformed": dict(self._malformed),
                "send_failures": self._send_failures,
                "reconnects": self._reconnects,
                "batches": self._batches,
                "mean_batch": self._batched_rois / self._batches if self._batches else 0.0,
                "stage_ms": {
                    s: 1000.0 * self._stage_sum_s[s] / self._stage_calls[s] for s in sorted(self._stage_calls)
                },
            }


# ---------------------------------------------------------------- stage-group process (prefix vcascade_stage_group_)

GROUP_BATCHES = Counter(
    "vcascade_stage_group_batches_total", "Micro-batches answered, by outcome (result, error).", ["group", "outcome"]
)
GROUP_STAGE_SECONDS = Histogram(
    "vcascade_stage_group_stage_seconds", "Compute time of one stage on one micro-batch, s.", ["group", "stage"],
    buckets=LATENCY_BUCKETS_S,
)
GROUP_MALFORMED = Counter(
    "vcascade_stage_group_malformed_messages_total", "Received messages dropped as malformed, by reason.",
    ["group", "reason"],
)


class StageGroupTelemetry:
    """Counts events of one stage group into its metrics and its report snapshot. Thread-safe."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._lock = threading.Lock()
        self._answered = 0
        self._failed: _Tally[str] = _Tally()
        self._malformed: _Tally[str] = _Tally()
        self._stage_sum_s: _Tally[str] = _Tally()
        self._stage_calls: _Tally[str] = _Tally()

    def answered(self) -> None:
        """One micro-batch answered with a result."""
        GROUP_BATCHES.labels(self.group, "result").inc()
        with self._lock:
            self._answered += 1

    def failed(self, stage: str) -> None:
        """One micro-batch answered with an error because ``stage`` raised."""
        GROUP_BATCHES.labels(self.group, "error").inc()
        with self._lock:
            self._failed[stage] += 1

    def malformed(self, reason: str) -> None:
        """One received message dropped as malformed."""
        GROUP_MALFORMED.labels(self.group, reason).inc()
        with self._lock:
            self._malformed[reason] += 1

    def stage_computed(self, index: int, seconds: float) -> None:
        """Pipeline stage ``index`` (the recognizer's numbering) computed one micro-batch in ``seconds``."""
        stage = f"stage{index}"
        GROUP_STAGE_SECONDS.labels(self.group, stage).observe(seconds)
        with self._lock:
            self._stage_sum_s[stage] += seconds
            self._stage_calls[stage] += 1

    def snapshot(self, final: bool) -> dict:
        """The report dict: micro-batches answered and failed, malformed messages, mean compute ms per stage."""
        with self._lock:
            return {
                "component": "stage_group", "name": self.group, "final": final, "answered": self._answered,
                "failed": dict(self._failed), "malformed": dict(self._malformed),
                "stage_ms": {s: 1000.0 * self._stage_sum_s[s] / self._stage_calls[s] for s in sorted(self._stage_calls)},
            }

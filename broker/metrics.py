"""Prometheus metrics of the broker (``vcascade_broker_*``), every series labelled ``broker=<name>``, and the
object that counts events into them.

Declared once per process in the default registry (served by :func:`vcascade.core.telemetry.metrics.serve_metrics`);
:class:`BrokerTelemetry` binds them to one broker name (so several brokers, in tests, can share a process) and
offers one method per event: the only counting call the broker makes for it. The broker's ``report`` counts
(:class:`vcascade.broker.books.Stats`, :attr:`BrokerTelemetry.counts`) are kept by the same calls, never
separately. The per-ROI counters are counted in plain ints and published at the loop's housekeeping tick
(:meth:`BrokerTelemetry.publish`): scraped, they lag by at most one tick.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from vcascade.broker.books import Stats
from vcascade.core.config import NAME_PATTERN
from vcascade.core.transport.disconnects import disconnects_counter
from vcascade.core.transport.security import auth_failures_counter
from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S
from vcascade.core.telemetry.tally import CounterTally, HistogramTally

MAX_CAMERA_LABELS = 256
"""Distinct ``camera`` label values per broker at most; later cameras (and names that are not valid config
names, which a peer could send) are counted under :data:`OTHER_CAMERA`, so peers cannot grow the series."""
OTHER_CAMERA = "other"
_CAMERA_NAME = re.compile(NAME_PATTERN)

ROIS_RECEIVED = Counter(
    "vcascade_broker_rois_received_total", "ROIs received from edges (well-formed).", ["broker", "camera"]
)
ROIS_DISPATCHED = Counter("vcascade_broker_rois_dispatched_total", "ROIs forwarded to workers.", ["broker"])
RESULTS = Counter("vcascade_broker_results_total", "Results forwarded from workers to edges.", ["broker"])
DROPS = Counter(
    "vcascade_broker_drops_total",
    "ROIs or answers the broker itself gave up on, by reason (worker Drops are forwarded, not counted here).",
    ["broker", "reason"],
)
MALFORMED = Counter(
    "vcascade_broker_malformed_messages_total",
    "Messages dropped as undecodable or out of protocol, by socket side (frontend/backend) and reason.",
    ["broker", "side", "reason"],
)
REDISPATCHED = Counter(
    "vcascade_broker_rois_redispatched_total",
    "ROIs taken back from a lost worker and queued again for another one (bounded by max_attempts).",
    ["broker"],
)
SEND_FAILURES = Counter(
    "vcascade_broker_send_failures_total",
    "Messages ZeroMQ refused to queue, by socket side and reason (unreachable: peer gone; hwm: its pipe full). "
    "ROIs and answers among them are also counted in vcascade_broker_drops_total.",
    ["broker", "side", "reason"],
)
EDGES = Gauge("vcascade_broker_edges", "Edges heard from within the heartbeat liveness window.", ["broker"])
QUEUE_DEPTH = Gauge("vcascade_broker_queue_depth", "ROIs waiting for worker credit.", ["broker"])
QUEUE_BYTES = Gauge(
    "vcascade_broker_queue_bytes", "Bytes of the ROIs waiting for worker credit (headers and crops).", ["broker"]
)
IN_FLIGHT = Gauge("vcascade_broker_in_flight", "ROIs held by workers, not yet answered.", ["broker"])
WORKERS = Gauge("vcascade_broker_workers", "Registered (live) workers.", ["broker"])
WORKER_CREDITS = Gauge(
    "vcascade_broker_worker_credits",
    "Credits a worker announced in its last Ready (`other`: a name that is no valid config name, or beyond "
    "MAX_WORKER_LABELS).",
    ["broker", "worker"],
)
MAX_WORKER_LABELS = 256
"""Distinct ``worker`` label values of live workers per broker at most (names come from peers); later ones and
names that are not valid config names are labelled :data:`OTHER_CAMERA` (``other``)."""
WORKERS_EVICTED = Counter(
    "vcascade_broker_workers_evicted_total",
    "Workers unregistered to make room for a new one at max_workers (they never answered or owed answers).",
    ["broker"],
)
ROIS_OVERDUE = Counter(
    "vcascade_broker_rois_overdue_total",
    "ROIs taken back from a worker that held them unanswered past answer_timeout_s (then re-dispatched or dropped).",
    ["broker"],
)
MAX_RECOGNIZER_LABELS = 64
"""Distinct ``recognizer`` label values per broker at most (names come from peers); later ones count as
:data:`OTHER_CAMERA` (``other``). ROIs and workers naming no recognizer are labelled :data:`ANY_RECOGNIZER`."""
ANY_RECOGNIZER = "any"
RECOGNIZER_QUEUE_DEPTH = Gauge(
    "vcascade_broker_recognizer_queue_depth",
    "ROIs waiting for a worker of their recognizer with free credit, by recognizer (`any`: ROIs for any worker).",
    ["broker", "recognizer"],
)
RECOGNIZER_WORKERS = Gauge(
    "vcascade_broker_recognizer_workers",
    "Registered (live) workers by the recognizer they announced (`any`: workers that announced none).",
    ["broker", "recognizer"],
)
RECOGNIZER_DISPATCHED = Counter(
    "vcascade_broker_recognizer_rois_dispatched_total",
    "ROIs forwarded to workers, by the recognizer they are for (`any`: ROIs for any worker).",
    ["broker", "recognizer"],
)
QUEUE_SECONDS = Histogram(
    "vcascade_broker_queue_seconds",
    "Time an ROI waited in the broker queue before dispatch, seconds.",
    ["broker"],
    buckets=LATENCY_BUCKETS_S,
)
AUTH_FAILURES = auth_failures_counter("broker")
"""``vcascade_broker_auth_failures_total{broker, reason}``: clients refused in the CurveZMQ handshake, counted by
:class:`vcascade.core.transport.security.AuthFailureMonitor` (declared here so the family is exported from the start)."""
DISCONNECTS = disconnects_counter("broker")
"""``vcascade_broker_disconnects_total{broker, socket}``: connections the frontend or backend lost, among them peers
libzmq cut for a message over the size limit (:mod:`vcascade.core.transport.disconnects`; declared here so the family is
exported from the start)."""


class _Children(dict):
    """A metric's children by label value, each bound on first use (a ``labels()`` lookup costs about 2 us, a dict
    lookup a tenth of that); as bounded as the label values given to it."""

    def __init__(self, bind: Callable[[str], Counter]) -> None:
        super().__init__()
        self._bind = bind

    def __missing__(self, label: str) -> Counter:
        child = self[label] = self._bind(label)
        return child


class BrokerTelemetry:
    """Counts the events of one broker into its metrics. Used by the broker's loop thread only.

    The counters of events that happen per ROI or per answer (received, dispatched with the queue time, results,
    drops, malformed messages, send failures) are counted in plain ints (:mod:`vcascade.core.telemetry.tally`)
    and added to the Prometheus series by :meth:`publish`, which the loop calls at its housekeeping tick
    (``POLL_MS``) and at shutdown: a scrape sees them at most one tick late. The other counters (re-dispatched,
    overdue, evicted) and the gauges are set at once. Each counting method also adds to :attr:`counts` (the
    ``report`` dict) in the same call, so the two never disagree once published. The broker-wide series
    (dispatched, results, occupancy gauges, queue time, re-dispatched) read 0 from construction on.

    Args:
        broker: the broker's name from the deployment file (label value).
    """

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.counts = Stats()
        """This broker's run totals behind its ``report`` dict, kept by the counting methods below."""
        self._dispatched = ROIS_DISPATCHED.labels(broker=broker)
        self._results = RESULTS.labels(broker=broker)
        self._queue_depth = QUEUE_DEPTH.labels(broker=broker)
        self._in_flight = IN_FLIGHT.labels(broker=broker)
        self._workers = WORKERS.labels(broker=broker)
        self._redispatched = REDISPATCHED.labels(broker=broker)
        self._edges = EDGES.labels(broker=broker)
        self._queue_bytes = QUEUE_BYTES.labels(broker=broker)
        self._evicted = WORKERS_EVICTED.labels(broker=broker)
        self._overdue = ROIS_OVERDUE.labels(broker=broker)
        self._cameras: set[str] = set()
        self._recognizers: set[str] = set()
        self._worker_labels: set[str] = set()  # labels of live workers' credit series
        # counted per event in plain ints (keys: raw names, bounded to labels at publish), published at the tick
        received = _Children(lambda label: ROIS_RECEIVED.labels(broker=broker, camera=label))
        self._received: CounterTally[str] = CounterTally(lambda camera: received[self.camera_label(camera)])
        by_recognizer = _Children(lambda label: RECOGNIZER_DISPATCHED.labels(broker=broker, recognizer=label))
        self._dispatched_by: CounterTally[str] = CounterTally(lambda r: by_recognizer[self.recognizer_label(r)])
        self._queue_seconds = HistogramTally(QUEUE_SECONDS.labels(broker=broker))
        self._results_n = 0
        self._drops: CounterTally[str] = CounterTally(lambda reason: DROPS.labels(broker=broker, reason=reason))
        self._malformed: CounterTally[tuple[str, str]] = CounterTally(
            lambda key: MALFORMED.labels(broker=broker, side=key[0], reason=key[1])
        )
        self._send_failures: CounterTally[tuple[str, str]] = CounterTally(
            lambda key: SEND_FAILURES.labels(broker=broker, side=key[0], reason=key[1])
        )

    def publish(self) -> None:
        """Add what was counted since the last call to the Prometheus series (the loop's housekeeping tick)."""
        dispatched = sum(self._dispatched_by.counts.values())
        if dispatched:
            self._dispatched.inc(dispatched)
        if self._results_n:
            self._results.inc(self._results_n)
            self._results_n = 0
        for tally in (self._received, self._dispatched_by, self._queue_seconds, self._drops, self._malformed,
                      self._send_failures):  # fmt: skip
            tally.publish()

    def roi_received(self, camera: str) -> None:
        """Count one well-formed ROI from ``camera`` (label bounded at publish, see :data:`MAX_CAMERA_LABELS`)."""
        self.counts.received += 1
        self._received.counts[camera] += 1

    def dispatched(self, recognizer: str, queued_s: float) -> None:
        """One ROI for ``recognizer`` (``""``: any) forwarded to a worker after waiting ``queued_s`` seconds here."""
        self.counts.forwarded += 1
        self._dispatched_by.counts[recognizer] += 1
        self._queue_seconds.observe(queued_s)

    def result_forwarded(self) -> None:
        """One result forwarded from a worker to its edge."""
        self.counts.results += 1
        self._results_n += 1

    def worker_drop_forwarded(self) -> None:
        """One worker's Drop forwarded to its edge (a report count only: the worker counts its own drops)."""
        self.counts.worker_drops += 1

    def redispatched(self, count: int) -> None:
        """``count`` ROIs taken back from a lost worker and queued again."""
        self.counts.redispatched += count
        self._redispatched.inc(count)

    def overdue(self, count: int) -> None:
        """``count`` ROIs taken back from a worker that held them past the answer deadline."""
        self._overdue.inc(count)

    def worker_evicted(self) -> None:
        """One worker unregistered to make room for a new one."""
        self._evicted.inc()

    def occupancy(self, *, queued: int, in_flight: int, workers: int, edges: int, queued_bytes: int = 0) -> None:
        """Publish the ROIs queued (and their bytes) and held by workers, the registered workers and the live edges
        now."""
        self._queue_depth.set(queued)
        self._queue_bytes.set(queued_bytes)
        self._in_flight.set(in_flight)
        self._workers.set(workers)
        self._edges.set(edges)

    def camera_label(self, camera: str) -> str:
        """``camera`` itself while fewer than ``MAX_CAMERA_LABELS`` were used and it is a valid name, else
        ``other``."""
        return _bounded_label(camera, self._cameras, MAX_CAMERA_LABELS)

    def send_failed(self, side: str, reason: str) -> None:
        """Count one message not queued on ``side`` (``frontend``/``backend``) for ``reason``."""
        self._send_failures.counts[side, reason] += 1

    def dropped(self, reason: str, n: int = 1) -> None:
        """Count ``n`` broker drops with ``reason`` (snake_case)."""
        self.counts.drops[reason] += n
        self._drops.counts[reason] += n

    def malformed(self, side: str, reason: str) -> None:
        """Count one malformed message on ``side`` (``frontend`` or ``backend``)."""
        self.counts.malformed += 1
        self._malformed.counts[side, reason] += 1

    def worker_label(self, worker: str) -> str:
        """The ``worker`` label of a worker's announced name: the name while it is a valid config name and fewer
        than ``MAX_WORKER_LABELS`` live workers have one, else ``other``."""
        return _bounded_label(worker, self._worker_labels, MAX_WORKER_LABELS)

    def set_credits(self, label: str, credits: int) -> None:
        """Publish a worker's announced credits under its label (:meth:`worker_label`)."""
        WORKER_CREDITS.labels(broker=self.broker, worker=label).set(credits)

    def forget_worker(self, label: str) -> None:
        """Remove a gone worker's credit series (label cardinality stays bounded by ``MAX_WORKER_LABELS``); the
        ``other`` series stays."""
        if label == OTHER_CAMERA or label not in self._worker_labels:
            return
        self._worker_labels.discard(label)
        try:
            WORKER_CREDITS.remove(self.broker, label)
        except KeyError:
            pass

    def recognizer_label(self, recognizer: str) -> str:
        """``any`` for ``""``; the name itself while fewer than ``MAX_RECOGNIZER_LABELS`` were used, else
        ``other``."""
        if not recognizer:
            return ANY_RECOGNIZER
        return _bounded_label(recognizer, self._recognizers, MAX_RECOGNIZER_LABELS)

    def set_recognizer_gauges(self, queued: dict[str, int], workers: dict[str, int]) -> None:
        """Publish queued ROIs and registered workers per recognizer; a recognizer seen before and absent from
        both dicts reads 0 (its series stay, bounded by ``MAX_RECOGNIZER_LABELS``)."""
        depths: dict[str, int] = {}
        counts: dict[str, int] = {}
        for recognizer, n in queued.items():
            label = self.recognizer_label(recognizer)
            depths[label] = depths.get(label, 0) + n
        for recognizer, n in workers.items():
            label = self.recognizer_label(recognizer)
            counts[label] = counts.get(label, 0) + n
        for label in {ANY_RECOGNIZER, *self._recognizers, *depths, *counts}:
            RECOGNIZER_QUEUE_DEPTH.labels(broker=self.broker, recognizer=label).set(depths.get(label, 0))
            RECOGNIZER_WORKERS.labels(broker=self.broker, recognizer=label).set(counts.get(label, 0))


def _bounded_label(name: str, used: set[str], limit: int) -> str:
    """``name`` as a label value when it is in ``used``, or when it is a valid config name and fewer than ``limit``
    values are used (then it is added to ``used``); else ``other`` (:data:`OTHER_CAMERA`)."""
    if name in used:
        return name
    if len(used) >= limit or not _CAMERA_NAME.fullmatch(name):
        return OTHER_CAMERA
    used.add(name)
    return name

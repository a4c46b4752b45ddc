"""Load-balancing policy of the broker: pure data structures, no sockets, no clock reads.

The socket loop (:mod:`vcascade.broker.server`) feeds events in (an ROI arrived, a worker announced credits, a result
came back, time passed) and asks which ROI goes to which worker next. Every method takes the current time
(``time.perf_counter()`` seconds, or any monotonic clock) as an argument, so the policy is deterministic and
tested without sockets (the shape of Locust's ``dispatch.py``, see DESIGN.md "Code shape").

Policy (DESIGN.md "Load balancing and reliability"):

* **Routing by recognizer** (the Majordomo pattern, ZeroMQ Guide ch. 4: requests name a service, the broker keeps
  workers per service): an ROI names its recognizer (``wire.Roi.recognizer``) and goes only to a worker that
  announced that recognizer; a worker's recognizer is fixed at registration. An ROI naming none (``""``) goes
  to any worker; a worker naming none takes only such ROIs.
* **Per-(recognizer, camera) FIFO queues served round-robin** (:mod:`vcascade.broker.queues`): each dispatch takes the
  head of the next queue that has a worker of its recognizer with free credit, so a camera that floods the
  broker cannot starve a quiet one, and ROIs waiting for a busy (or absent) recognizer never block ROIs of
  another (no head-of-line blocking).
* **Bounded queue, drop-oldest from the longest queue**: when more than ``queue_max`` ROIs wait, the oldest
  ROI of the *longest* queue is dropped (ties: the queue whose head is oldest). The flooding camera (or the
  recognizer without workers) pays for its own backlog, and with one queue this is plain drop-oldest.
* **Credits**: a worker holds at most ``credits`` ROIs in flight (from its last ``Ready``). Among the workers
  of the ROI's recognizer with free credit the least loaded (``in_flight / credits``) wins; ties go to the
  least recently used worker.
* **Deadlines**: an ROI with ``ttl_ms > 0`` that waited longer than ``ttl_ms`` is stale; stale heads are set
  aside when dispatching and :meth:`Dispatcher.stale` sweeps every queue.
* **Liveness**: a worker silent for ``worker_timeout_s`` (:class:`vcascade.core.liveness.PeerLiveness`) is
  expired; its in-flight ROIs are handed back to the caller so every ROI is answered exactly once.
* **Re-dispatch, bounded**: the caller hands a lost worker's ROIs to :meth:`Dispatcher.requeue`; each goes
  back to the *head* of its queue (it is older than anything queued behind it; same recognizer) until it has been
  dispatched ``max_attempts`` times, after which it is returned to the caller to be dropped (``worker_lost``).
  An answer from a worker the ROI was taken from is *late* (:meth:`Dispatcher.was_taken_from`): only the
  current holder's answer completes an ROI, so exactly one answer per ROI leaves the broker.

Memory is bounded: queued ROIs by ``queue_max``, in-flight ROIs by the sum of credits, workers by
``max_workers``, remembered re-dispatches by ``TAKEN_MEMORY``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from vcascade.broker.queues import RoiQueues
from vcascade.core.liveness import PeerLiveness

MAX_WORKERS = 1024
"""Default bound on registered workers (a rogue peer sending Ready from many identities cannot grow memory)."""

WORKER_TIMEOUT_S = 3.0
"""Default liveness window, s: ``HeartbeatConfig`` defaults (3 missed 1-s heartbeats; Paranoid Pirate, ZeroMQ
Guide ch. 4). The broker passes ``liveness * interval_s`` of the deployment unless told otherwise."""

TAKEN_MEMORY = 65_536
"""Re-dispatched ROI ids remembered (oldest forgotten first) to tell a late answer from an unknown one."""


@dataclass(slots=True)
class Pending:
    """An ROI waiting in the broker queue.

    Attributes:
        roi_id: globally unique ROI id (``wire.Roi.roi_id``).
        camera: camera name; selects the per-camera queue.
        received_s: time the broker received it, seconds on the caller's monotonic clock.
        ttl_ms: deadline, ms it may wait in the queue; ``0`` means none (``wire.Roi.ttl_ms``).
        data: opaque payload for the caller (routing identity and frames); never inspected here.
        attempts: times it was dispatched to a worker so far (0 while never dispatched).
        recognizer: the recognizer it is for (``wire.Roi.recognizer``); ``""``: any worker.
    """

    roi_id: str
    camera: str
    received_s: float
    ttl_ms: float = 0.0
    data: Any = None
    attempts: int = 0
    recognizer: str = ""

    def is_stale(self, now_s: float) -> bool:
        """True when the ROI has a deadline and waited longer than ``ttl_ms`` by ``now_s`` (seconds)."""
        return self.ttl_ms > 0 and (now_s - self.received_s) * 1000.0 > self.ttl_ms


@dataclass(slots=True)
class InFlight:
    """An ROI handed to a worker and not yet answered.

    Attributes:
        pending: the queued ROI as it was enqueued.
        worker: key of the worker holding it.
        dispatched_s: time it was assigned, seconds on the caller's clock.
        seq: its enqueue order (keeps a re-queued ROI in order with its camera queue).
    """

    pending: Pending
    worker: Hashable
    dispatched_s: float
    seq: int = 0


@dataclass(slots=True)
class _Worker:
    credits: int
    recognizer: str = ""
    last_used: int = 0  # dispatch counter value of its last assignment; 0 = never used (least recent)
    in_flight: set[str] = field(default_factory=set)

    def load(self) -> float:
        return len(self.in_flight) / self.credits

    def has_credit(self) -> bool:
        return len(self.in_flight) < self.credits

    def serves(self, recognizer: str) -> bool:
        """An ROI for ``recognizer`` may go to this worker: the same recognizer, or an ROI for any."""
        return not recognizer or recognizer == self.recognizer


class WorkerLimit(RuntimeError):
    """A new worker would exceed ``max_workers``. Recovery: ignore its Ready and count it as bad input."""


class RecognizerChanged(RuntimeError):
    """A registered worker announced another recognizer than at registration. Recovery: ignore that Ready and
    count it; the worker keeps its first recognizer (a worker process runs one model for its lifetime)."""


class Dispatcher:
    """Per-(recognizer, camera) round-robin queues plus credit-based, least-loaded worker choice per recognizer.

    Args:
        queue_max: ROIs that may wait at most (all cameras together), >= 1.
        max_workers: workers that may be registered at once, >= 1.
        max_attempts: dispatches of one ROI at most (``BrokerConfig.max_attempts``), >= 1.
        worker_timeout_s: a worker silent for longer is expired by :meth:`expire_workers`, seconds (> 0).

    Raises:
        ValueError: a bound below 1, or ``worker_timeout_s <= 0``.
    """

    def __init__(self, queue_max: int, max_workers: int = MAX_WORKERS, max_attempts: int = 2,
                 worker_timeout_s: float = WORKER_TIMEOUT_S) -> None:  # fmt: skip
        if queue_max < 1 or max_workers < 1 or max_attempts < 1 or worker_timeout_s <= 0:
            bounds = f"queue_max={queue_max}, max_workers={max_workers}, max_attempts={max_attempts}"
            raise ValueError(f"{bounds}: each must be >= 1; worker_timeout_s={worker_timeout_s} must be > 0")
        self.queue_max = queue_max
        self.max_workers = max_workers
        self.max_attempts = max_attempts
        self._taken: OrderedDict[str, frozenset[Hashable]] = OrderedDict()  # roi_id -> workers it was taken from
        self._queues = RoiQueues()
        self._seq = 0
        self._workers: dict[Hashable, _Worker] = {}
        self._heard: PeerLiveness[Hashable] = PeerLiveness(worker_timeout_s, max_workers)  # registered workers only
        self._in_flight: dict[str, InFlight] = {}
        self._dispatches = 0

    # ------------------------------------------------------------------ queue

    @property
    def queued(self) -> int:
        """Number of ROIs waiting for a worker."""
        return len(self._queues)

    @property
    def in_flight(self) -> int:
        """Number of ROIs held by workers."""
        return len(self._in_flight)

    def __contains__(self, roi_id: str) -> bool:
        """True when the ROI id is queued or in flight (a second copy would be a duplicate)."""
        return roi_id in self._queues or roi_id in self._in_flight

    def enqueue(self, item: Pending) -> list[Pending]:
        """Queue an ROI at the tail of its (recognizer, camera) queue.

        Returns:
            The ROIs dropped to keep at most ``queue_max`` queued (oldest of the longest queue),
            oldest first; usually empty. May contain ``item`` itself only if it is the oldest of the longest
            queue, which happens when ``queue_max`` is 1 and its camera already had one waiting.

        Raises:
            ValueError: ``item.roi_id`` is already queued or in flight.
        """
        if item.roi_id in self:
            raise ValueError(f"duplicate roi_id {item.roi_id!r}")
        self._seq += 1
        self._queues.append(self._seq, item)
        return self._trim()

    def _trim(self) -> list[Pending]:
        """Drop the oldest ROI of the longest queue until at most ``queue_max`` wait."""
        dropped = []
        while len(self._queues) > self.queue_max:
            dropped.append(self._queues.pop_head(self._queues.longest())[1])
        return dropped

    def requeue(self, flights: list[InFlight]) -> tuple[list[Pending], list[Pending]]:
        """Put a lost worker's ROIs back at the head of their queues, for another worker of their recognizer.

        Each keeps its enqueue order, so a queue stays oldest first. Call it with the flights returned
        by :meth:`worker_gone` or :meth:`expire_workers`; the worker they came from is remembered for
        :meth:`was_taken_from`.

        Returns:
            ``(given_up, dropped)``: ROIs already dispatched ``max_attempts`` times (not re-queued; drop them
            as ``worker_lost``), and ROIs dropped to keep ``queue_max`` (oldest of the longest queue, possibly
            re-queued ones; drop them as ``queue_full``).
        """
        given_up, back = [], []
        for flight in flights:
            self._remember_taken(flight.pending.roi_id, flight.worker)
            if flight.pending.attempts >= self.max_attempts:
                given_up.append(flight.pending)
            else:
                back.append((flight.seq, flight.pending))
        self._queues.put_back(back)
        return given_up, self._trim()

    def _remember_taken(self, roi_id: str, worker: Hashable) -> None:
        self._taken[roi_id] = self._taken.pop(roi_id, frozenset()) | {worker}
        while len(self._taken) > TAKEN_MEMORY:
            self._taken.popitem(last=False)

    def was_taken_from(self, roi_id: str, worker: Hashable) -> bool:
        """True when ``worker`` held ``roi_id`` before it was re-queued: an answer from it now is late."""
        return worker in self._taken.get(roi_id, ())

    def stale(self, now_s: float) -> list[Pending]:
        """Remove and return every queued ROI past its deadline at ``now_s`` (seconds). O(queued)."""
        return self._queues.remove_if(lambda item: item.is_stale(now_s))

    def drain(self) -> list[Pending]:
        """Remove and return every queued ROI (shutdown), in enqueue order."""
        return self._queues.drain()

    def queued_by_recognizer(self) -> dict[str, int]:
        """Queued ROIs per recognizer (``""``: ROIs for any worker); recognizers with none queued are absent."""
        return self._queues.depth_by_recognizer()

    # ------------------------------------------------------------------ workers

    @property
    def workers(self) -> int:
        """Number of registered workers."""
        return len(self._workers)

    def credits(self, worker: Hashable) -> int | None:
        """Credits the worker last announced, or None when it is not registered."""
        state = self._workers.get(worker)
        return None if state is None else state.credits

    def load(self, worker: Hashable) -> int | None:
        """ROIs the worker holds in flight, or None when it is not registered."""
        state = self._workers.get(worker)
        return None if state is None else len(state.in_flight)

    def worker_ready(self, worker: Hashable, credits: int, now_s: float, recognizer: str = "") -> bool:
        """Register a worker of ``recognizer`` or update its credits; also marks it seen at ``now_s``.

        Lowering credits below the current in-flight count keeps those ROIs; no new ROI goes to the worker
        until it is below its credits again. ``recognizer`` ``""``: the worker takes only ROIs for any worker.

        Returns:
            True when the worker was not registered before.

        Raises:
            ValueError: ``credits`` < 0.
            WorkerLimit: a new worker while ``max_workers`` are registered.
            RecognizerChanged: a registered worker with another ``recognizer`` (nothing is updated).
        """
        if credits < 0:
            raise ValueError(f"credits={credits} must be >= 0")
        state = self._workers.get(worker)
        if state is not None:
            if state.recognizer != recognizer:
                raise RecognizerChanged(f"worker {worker!r} runs {state.recognizer!r}, announced {recognizer!r}")
            state.credits = credits
        elif len(self._workers) >= self.max_workers:
            raise WorkerLimit(f"{len(self._workers)} workers registered (max {self.max_workers})")
        else:
            self._workers[worker] = _Worker(credits=credits, recognizer=recognizer)
        self._heard.heard(worker, now_s)
        return state is None

    def recognizer(self, worker: Hashable) -> str | None:
        """The recognizer the worker registered with, or None when it is not registered."""
        state = self._workers.get(worker)
        return None if state is None else state.recognizer

    def workers_by_recognizer(self) -> dict[str, int]:
        """Registered workers per announced recognizer (``""``: workers that announced none)."""
        counts: dict[str, int] = {}
        for state in self._workers.values():
            counts[state.recognizer] = counts.get(state.recognizer, 0) + 1
        return counts

    def give_up_reason(self, item: Pending, reason: str) -> str:
        """The drop reason of a queued ROI given up as ``stale`` or ``queue_full``: ``no_worker`` instead when it
        is for a recognizer no registered worker runs (it waited in vain); any other reason is returned as is."""
        if reason in ("stale", "queue_full") and item.recognizer and not self.has_worker(item.recognizer):
            return "no_worker"
        return reason

    def has_worker(self, recognizer: str) -> bool:
        """True when some registered worker (busy or not) takes ROIs for ``recognizer`` (``""``: any worker)."""
        return any(state.serves(recognizer) for state in self._workers.values())

    def worker_seen(self, worker: Hashable, now_s: float) -> bool:
        """Mark a registered worker alive at ``now_s`` (any message from it). Returns False if unknown."""
        if worker not in self._workers:
            return False
        self._heard.heard(worker, now_s)
        return True

    def worker_gone(self, worker: Hashable) -> list[InFlight]:
        """Unregister a worker (Bye, send failure). Returns its in-flight ROIs, now owned by the caller."""
        state = self._workers.pop(worker, None)
        if state is None:
            return []
        self._heard.forget(worker)
        return [self._in_flight.pop(roi_id) for roi_id in sorted(state.in_flight)]

    def expire_workers(self, now_s: float) -> list[tuple[Hashable, list[InFlight]]]:
        """Unregister every worker not seen for more than ``worker_timeout_s`` seconds at ``now_s``.

        Returns:
            ``(worker, its in-flight ROIs)`` for each expired worker, in registration order.
        """
        silent = set(self._heard.expired(now_s))
        return [(worker, self.worker_gone(worker)) for worker in list(self._workers) if worker in silent]

    # ------------------------------------------------------------------ dispatch

    def next_dispatch(self, now_s: float) -> tuple[InFlight | None, list[Pending]]:
        """Assign the next ROI to the best worker of its recognizer with free credit, round-robin over the
        (recognizer, camera) queues; queues whose recognizer has no worker with free credit are passed over.

        Stale ROIs met at the queue heads on the way are removed and returned, not dispatched.

        Returns:
            ``(assignment or None, stale ROIs)``; None when no queued ROI has a worker with credit.
        """
        stale: list[Pending] = []
        blocked: set[str] = set()  # recognizers without a worker with free credit, in this call
        for key in self._queues.keys():
            recognizer = key[0]
            worker = None if recognizer in blocked else self._pick_worker(recognizer)
            if worker is None:
                blocked.add(recognizer)
                continue
            while True:
                seq, item = self._queues.pop_head(key)
                if not item.is_stale(now_s):
                    self._queues.rotate(key)
                    return self._assign(item, worker, now_s, seq), stale
                stale.append(item)
                if not self._queues.has_queue(key):
                    break
        return None, stale

    def _pick_worker(self, recognizer: str) -> Hashable | None:
        """Least loaded worker of ``recognizer`` (``""``: any) with free credit; ties: least recently used,
        then registration order."""
        best, best_key = None, None
        for worker, state in self._workers.items():
            if (not recognizer or state.recognizer == recognizer) and state.has_credit():  # inlined serves()
                key = (state.load(), state.last_used)
                if best_key is None or key < best_key:
                    best, best_key = worker, key
        return best

    def _assign(self, item: Pending, worker: Hashable, now_s: float, seq: int) -> InFlight:
        self._dispatches += 1
        state = self._workers[worker]
        state.last_used = self._dispatches
        state.in_flight.add(item.roi_id)
        item.attempts += 1
        flight = InFlight(pending=item, worker=worker, dispatched_s=now_s, seq=seq)
        self._in_flight[item.roi_id] = flight
        return flight

    def complete(self, roi_id: str, worker: Hashable) -> InFlight | None:
        """A worker answered an ROI (Result or Drop): free its credit.

        Returns:
            The in-flight record, or None when ``roi_id`` is not in flight on that worker (late, duplicate or
            foreign answer; the caller counts it and drops it).
        """
        flight = self._in_flight.get(roi_id)
        if flight is None or flight.worker != worker:
            return None
        del self._in_flight[roi_id]
        state = self._workers.get(worker)
        if state is not None:
            state.in_flight.discard(roi_id)
        return flight

    def drain_in_flight(self) -> list[InFlight]:
        """Remove and return every in-flight ROI (shutdown); workers stay registered with no load."""
        flights = list(self._in_flight.values())
        self._in_flight.clear()
        for state in self._workers.values():
            state.in_flight.clear()
        return flights

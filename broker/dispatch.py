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
* **First sightings first** (issue 21): refreshes and better crops of tracks already recognised
  (``Pending.deferrable``, from ``wire.Roi.send_reason``) are dispatched only when no other queued ROI can be:
  the queues holding other ROIs are served round-robin first, then the rest round-robin
  (:mod:`vcascade.broker.queues`). Under overload the capacity goes to new objects, and the deadline drops
  the deferred ROIs (``stale``) before compute.
* **Direct hand-off** (issue 32): an ROI that arrives when no queued ROI could take the same workers goes to the
  worker the queued path would choose at once, with the same checks and books but no enqueue and dequeue
  (:meth:`Dispatcher.hand_off`): under the usual load nothing waits, and this is every ROI's path.
* **Bounded queue, drop-oldest from the longest queue**: when more than ``queue_max`` ROIs wait, the oldest
  ROI of the *longest* queue is dropped (ties: the queue whose head is oldest), its oldest deferrable ROI if it
  holds one. The flooding camera (or the recognizer without workers) pays for its own backlog, and with one
  queue of one class this is plain drop-oldest.
* **Bounded bytes** (:class:`ByteBounds`): when the queued ROIs weigh more than ``total`` bytes the oldest ROI
  of the heaviest queue is dropped; more than ``recognizer`` bytes for one recognizer: the oldest ROI of that
  recognizer's heaviest queue; more than ``edge`` bytes from one edge: that edge's oldest ROI. An ROI heavier
  than a bound alone is dropped at once and displaces nothing.
* **Credits**: a worker holds at most ``credits`` ROIs in flight (from its last ``Ready``). Among the workers
  of the ROI's recognizer with free credit the least loaded (``in_flight / credits``) wins; ties go to the
  least recently used worker.
* **Deadlines**: an ROI with ``ttl_ms > 0`` that waited longer than ``ttl_ms`` is stale; stale heads are set
  aside when dispatching and :meth:`Dispatcher.stale` sweeps every queue. At dispatch an ROI is also stale when
  it would be by the time the chosen worker starts computing it (the worker announces that wait in its
  ``Ready``): dropped before compute rather than computed late (issue 21).
* **Liveness**: a worker silent for ``worker_timeout_s`` (:class:`vcascade.core.transport.liveness.PeerLiveness`) is
  expired; its in-flight ROIs are handed back to the caller so every ROI is answered exactly once.
* **Answer deadline**: an ROI a worker has not answered ``answer_timeout_s`` after its dispatch is taken back
  (:meth:`Dispatcher.overdue`, re-dispatched like a lost worker's) and costs that worker one credit until it
  answers again (:mod:`vcascade.broker.workers`): a worker that heartbeats but never answers holds nothing.
* **Registration is never refused to fakes**: at ``max_workers``, a new worker takes the place of the least
  useful one, a worker that never answered or owes answers (:meth:`Dispatcher.make_room`).
* **Re-dispatch, bounded**: the caller hands a lost worker's ROIs to :meth:`Dispatcher.requeue`; each goes
  back to the *head* of its queue (it is older than anything queued behind it; same recognizer) until it has been
  dispatched ``max_attempts`` times, after which it is returned to the caller to be dropped (``worker_lost``).
  An answer from a worker the ROI was taken from is *late* (:meth:`Dispatcher.was_taken_from`): only the
  current holder's answer completes an ROI, so exactly one answer per ROI leaves the broker.

Memory is bounded: queued ROIs by ``queue_max`` and their bytes by :class:`ByteBounds`, in-flight ROIs by the
sum of credits, workers by ``max_workers``, remembered re-dispatches by ``TAKEN_MEMORY``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from vcascade.broker.bounds import ByteBounds, over_bound_victim
from vcascade.broker.queues import RoiQueues
from vcascade.broker.records import InFlight, Pending
from vcascade.broker.workers import RecognizerChanged, WorkerLimit, WorkerState
from vcascade.core.transport.liveness import PeerLiveness

__all__ = ["ByteBounds", "Dispatcher", "InFlight", "Pending", "RecognizerChanged", "WorkerLimit"]

MAX_WORKERS = 1024
"""Default bound on registered workers (a rogue peer sending Ready from many identities cannot grow memory)."""

WORKER_TIMEOUT_S = 3.0
"""Default liveness window, s: ``HeartbeatConfig`` defaults (3 missed 1-s heartbeats; Paranoid Pirate, ZeroMQ
Guide ch. 4). The broker passes ``liveness * interval_s`` of the deployment unless told otherwise."""

ANSWER_TIMEOUT_S = 20.0
"""Default answer deadline, s (``BrokerConfig.answer_timeout_s``): an ROI held longer by a worker is taken back."""

NO_WORKER_WAIT_S = 10.0
"""Default wait for an absent recognizer, s (``BrokerConfig.no_worker_wait_s``): a third of the edges' default
``roi_timeout_s`` (30 s), so the broker's ``no_worker`` answer reaches the edge before its ROI times out there."""

TAKEN_MEMORY = 65_536
"""Re-dispatched ROI ids remembered (oldest forgotten first) to tell a late answer from an unknown one."""


class Dispatcher:
    """Per-(recognizer, camera) round-robin queues plus credit-based, least-loaded worker choice per recognizer.

    Args:
        queue_max: ROIs that may wait at most (all cameras together), >= 1.
        max_workers: workers that may be registered at once, >= 1.
        max_attempts: dispatches of one ROI at most (``BrokerConfig.max_attempts``), >= 1.
        worker_timeout_s: a worker silent for longer is expired by :meth:`expire_workers`, seconds (> 0).
        byte_bounds: bytes of queued ROIs at most, in all, per recognizer and per edge.
        answer_timeout_s: an ROI not answered this long after its dispatch is taken back by :meth:`overdue`,
            seconds (> 0).
        no_worker_wait_s: an ROI that waited this long for a recognizer no registered worker runs is given up by
            :meth:`stranded`, seconds (> 0).

    Raises:
        ValueError: a bound below 1, or a timeout <= 0.
    """

    def __init__(self, queue_max: int, max_workers: int = MAX_WORKERS, max_attempts: int = 2,
                 worker_timeout_s: float = WORKER_TIMEOUT_S, byte_bounds: ByteBounds = ByteBounds(),
                 answer_timeout_s: float = ANSWER_TIMEOUT_S,
                 no_worker_wait_s: float = NO_WORKER_WAIT_S) -> None:  # fmt: skip
        if queue_max < 1 or max_workers < 1 or max_attempts < 1 or min(
            worker_timeout_s, answer_timeout_s, no_worker_wait_s
        ) <= 0:
            bounds = f"queue_max={queue_max}, max_workers={max_workers}, max_attempts={max_attempts}"
            timeouts = (f"worker_timeout_s={worker_timeout_s}, answer_timeout_s={answer_timeout_s}, "
                        f"no_worker_wait_s={no_worker_wait_s}")  # fmt: skip
            raise ValueError(f"{bounds}: each must be >= 1; {timeouts}: each must be > 0")
        self.queue_max = queue_max
        self.max_workers = max_workers
        self.max_attempts = max_attempts
        self.byte_bounds = byte_bounds
        self.answer_timeout_s = answer_timeout_s
        self.no_worker_wait_s = no_worker_wait_s
        self._taken: OrderedDict[str, frozenset[Hashable]] = OrderedDict()  # roi_id -> workers it was taken from
        self._queues = RoiQueues()
        self._seq = 0
        self._workers: dict[Hashable, WorkerState] = {}
        self._heard: PeerLiveness[Hashable] = PeerLiveness(worker_timeout_s, max_workers)  # registered workers only
        self._in_flight: dict[str, InFlight] = {}
        self._dispatches = 0

    # ------------------------------------------------------------------ queue

    @property
    def queued(self) -> int:
        """Number of ROIs waiting for a worker."""
        return len(self._queues)

    @property
    def queued_bytes(self) -> int:
        """Bytes of the ROIs waiting for a worker."""
        return self._queues.total_bytes

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
            The ROIs dropped to keep at most ``queue_max`` queued (oldest of the longest queue) and the queued
            bytes within :attr:`byte_bounds` (see the module's policy), in the order dropped; usually empty. Holds
            ``item`` itself when it is heavier than a byte bound alone (then only it), or when it is the oldest of
            the queue that pays (``queue_max`` 1 and its camera already had one waiting).

        Raises:
            ValueError: ``item.roi_id`` is already queued or in flight.
        """
        if item.roi_id in self:
            raise ValueError(f"duplicate roi_id {item.roi_id!r}")
        bounds = self.byte_bounds
        if item.size_bytes > min(bounds.total, bounds.recognizer, bounds.edge):
            return [item]
        self._seq += 1
        self._queues.append(self._seq, item)
        return self._trim([item])

    def hand_off(self, item: Pending, now_s: float) -> InFlight | None:
        """Dispatch an ROI that just arrived at once, without queueing it, when :meth:`enqueue` followed by
        :meth:`next_dispatch` would dispatch it now: no queued ROI could take the same workers
        (:meth:`RoiQueues.holds_rivals`), a worker of its recognizer has free credit, it fits the byte bounds, and it
        would not be stale when that worker starts it. The books are those of any dispatch (attempts, enqueue
        order, the worker's load and last use); the queues are not touched.

        Returns:
            The assignment (``dispatched_s`` = ``now_s``), or None: :meth:`enqueue` it (the queued path decides).

        Raises:
            ValueError: ``item.roi_id`` is already queued or in flight.
        """
        if item.roi_id in self:
            raise ValueError(f"duplicate roi_id {item.roi_id!r}")
        bounds = self.byte_bounds
        if self._queues.holds_rivals(item.recognizer) or item.size_bytes > min(bounds.total, bounds.recognizer,
                                                                                 bounds.edge):  # fmt: skip
            return None
        worker = self._pick_worker(item.recognizer)
        if worker is None or item.is_stale(now_s + self._workers[worker].start_delay_s):
            return None
        self._seq += 1
        return self._assign(item, worker, now_s, self._seq)

    def _trim(self, added: list[Pending]) -> list[Pending]:
        """Drop queued ROIs until every bound holds again; only the recognizers and edges of ``added`` (the ROIs
        just queued) can be over theirs."""
        dropped = []
        while (victim := over_bound_victim(self._queues, self.queue_max, self.byte_bounds, added)) is not None:
            dropped.append(victim)
        return dropped

    def requeue(self, flights: list[InFlight]) -> tuple[list[Pending], list[Pending]]:
        """Put a lost worker's ROIs back at the head of their queues, for another worker of their recognizer.

        Each keeps its enqueue order, so a queue stays oldest first. Call it with the flights returned by
        :meth:`worker_gone`, :meth:`expire_workers`, :meth:`make_room` or :meth:`overdue`; the worker they came
        from is remembered for :meth:`was_taken_from`.

        Returns:
            ``(given_up, dropped)``: ROIs already dispatched ``max_attempts`` times (not re-queued; drop them
            as ``worker_lost``), and ROIs dropped to keep ``queue_max`` and the byte bounds (as
            :meth:`enqueue`, possibly re-queued ones; drop them as ``queue_full``).
        """
        given_up, back = [], []
        for flight in flights:
            self._remember_taken(flight.pending.roi_id, flight.worker)
            if flight.pending.attempts >= self.max_attempts:
                given_up.append(flight.pending)
            else:
                back.append((flight.seq, flight.pending))
        self._queues.put_back(back)
        return given_up, self._trim([pending for _, pending in back])

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

    def stranded(self, now_s: float) -> list[Pending]:
        """Remove and return every queued ROI that has waited longer than ``no_worker_wait_s`` by ``now_s``
        (seconds) for a recognizer no registered worker runs (drop them as ``no_worker``). Without a deadline
        (``ttl_ms`` 0) such an ROI would otherwise wait until its edge gave up on it as ``timeout``. O(queued)
        when some recognizer has no worker, else O(recognizers)."""
        absent = {recognizer for recognizer in self.queued_by_recognizer() if not self.has_worker(recognizer)}
        if not absent:
            return []
        return self._queues.remove_if(
            lambda item: item.recognizer in absent and now_s - item.received_s > self.no_worker_wait_s
        )

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

    def worker_ready(self, worker: Hashable, credits: int, now_s: float, recognizer: str = "",
                     start_delay_s: float = 0.0) -> bool:  # fmt: skip
        """Register a worker of ``recognizer`` or update its credits and its announced start delay (``start_delay_s``,
        s: how long a micro-batch closed now waits there before compute); also marks it seen at ``now_s``.

        Lowering credits below the current in-flight count keeps those ROIs; no new ROI goes to the worker
        until it is below its credits again. ``recognizer`` ``""``: the worker takes only ROIs for any worker.

        Returns:
            True when the worker was not registered before.

        Raises:
            ValueError: ``credits`` < 0.
            WorkerLimit: a new worker while ``max_workers`` are registered (call :meth:`make_room` first).
            RecognizerChanged: a registered worker with another ``recognizer`` (nothing is updated).
        """
        if credits < 0:
            raise ValueError(f"credits={credits} must be >= 0")
        state = self._workers.get(worker)
        if state is not None:
            if state.recognizer != recognizer:
                raise RecognizerChanged(f"worker {worker!r} runs {state.recognizer!r}, announced {recognizer!r}")
            state.credits = credits
            state.start_delay_s = start_delay_s
        elif len(self._workers) >= self.max_workers:
            raise WorkerLimit(f"{len(self._workers)} workers registered (max {self.max_workers})")
        else:
            self._workers[worker] = WorkerState(credits=credits, recognizer=recognizer, start_delay_s=start_delay_s)
        self._heard.heard(worker, now_s)
        return state is None

    def make_room(self, worker: Hashable) -> list[tuple[Hashable, list[InFlight]]]:
        """Before registering ``worker``: when it is new and ``max_workers`` are registered, unregister the least
        useful worker (:meth:`vcascade.broker.workers.WorkerState.eviction_rank`: workers owing answers first,
        then those that never answered; among them the least recently heard), so workers that take ROIs and never
        answer can never keep a new worker out. A worker that answered and owes nothing is never evicted.

        Returns:
            ``(evicted worker, its in-flight ROIs)`` (hand the ROIs to :meth:`requeue`), or ``[]`` when there
            was room, ``worker`` is registered, or no worker may be evicted (:meth:`worker_ready` then raises
            :class:`WorkerLimit`).
        """
        if worker in self._workers or len(self._workers) < self.max_workers:
            return []
        evictable = [(state.eviction_rank(self._heard.last_heard_s(key) or 0.0), index, key)
                     for index, (key, state) in enumerate(self._workers.items()) if state.evictable()]  # fmt: skip
        if not evictable:
            return []
        victim = min(evictable)[2]
        return [(victim, self.worker_gone(victim))]

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

    def overdue(self, now_s: float) -> list[tuple[Hashable, list[InFlight]]]:
        """Take back every in-flight ROI not answered ``answer_timeout_s`` seconds after its dispatch at ``now_s``;
        each costs its worker one credit until the worker answers again (it stays registered).

        O(ROIs taken back): in-flight ROIs are kept in dispatch order, so the sweep stops at the first in time.

        Returns:
            ``(worker, its overdue ROIs)`` per worker, oldest dispatch first; hand the ROIs to :meth:`requeue`
            (an answer to them from that worker is then late, :meth:`was_taken_from`).
        """
        taken: dict[Hashable, list[InFlight]] = {}
        for flight in self._in_flight.values():
            if now_s - flight.dispatched_s <= self.answer_timeout_s:
                break
            taken.setdefault(flight.worker, []).append(flight)
        for worker, flights in taken.items():
            state = self._workers[worker]
            state.overdue += len(flights)
            for flight in flights:
                del self._in_flight[flight.pending.roi_id]
                state.in_flight.discard(flight.pending.roi_id)
        return list(taken.items())

    # ------------------------------------------------------------------ dispatch

    def next_dispatch(self, now_s: float) -> tuple[InFlight | None, list[Pending]]:
        """Assign the next ROI to the best worker of its recognizer with free credit, round-robin over the
        (recognizer, camera) queues; queues whose recognizer has no worker with free credit are passed over.

        Stale ROIs met at the queue heads on the way are removed and returned, not dispatched: those past their
        deadline, and those that would be past it when the chosen worker starts them (deadline-aware admission:
        ``now_s`` plus the worker's announced start delay, :meth:`worker_ready`). Cost: the queues
        passed over (those of recognizers without free credit) and the stale heads, never all the queues: the
        round-robin order is walked lazily, from its head, so a dispatch with thousands of cameras queued costs
        what it costs with one (issue 21: copying the order for each dispatch was O(cameras)).

        Returns:
            ``(assignment or None, stale ROIs)``; None when no queued ROI has a worker with credit.
        """
        if not self._queues:
            return None, []  # the usual call between two ROIs: nothing waits
        stale: list[Pending] = []
        blocked: set[str] = set()  # recognizers without a worker with free credit, in this call
        while (found := self._next_servable(blocked)) is not None:
            key, worker = found
            seq, item = self._queues.pop_head(key)
            if not item.is_stale(now_s + self._workers[worker].start_delay_s):  # stale when compute would start
                self._queues.rotate(key)
                return self._assign(item, worker, now_s, seq), stale
            stale.append(item)  # the queue's next head (or the next queue) is tried from the top again
        return None, stale

    def _next_servable(self, blocked: set[str]) -> tuple[tuple[str, str], Hashable] | None:
        """The first queue in round-robin order whose recognizer has a worker with free credit, and that worker;
        recognizers found without one are added to ``blocked``. None when no queue can be served."""
        for key in self._queues.iter_keys():
            if key[0] in blocked:
                continue
            worker = self._pick_worker(key[0])
            if worker is not None:
                return key, worker
            blocked.add(key[0])
        return None

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
        """A worker answered an ROI (Result or Drop): free its credit. Any answer from the worker, a late one
        included, gives back the credits its overdue ROIs cost (it answers again).

        Returns:
            The in-flight record, or None when ``roi_id`` is not in flight on that worker (late, duplicate or
            foreign answer; the caller counts it and drops it).
        """
        flight = self._in_flight.get(roi_id)
        state = self._workers.get(worker)
        if flight is None or flight.worker != worker:
            if state is not None and self.was_taken_from(roi_id, worker):
                state.answer()
            return None
        del self._in_flight[roi_id]
        if state is not None:
            state.in_flight.discard(roi_id)
            state.answer()
        return flight

    def drain_in_flight(self) -> list[InFlight]:
        """Remove and return every in-flight ROI (shutdown); workers stay registered with no load."""
        flights = list(self._in_flight.values())
        self._in_flight.clear()
        for state in self._workers.values():
            state.in_flight.clear()
        return flights

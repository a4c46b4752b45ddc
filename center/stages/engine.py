"""Stage engine: K pipeline stages, each in its own thread with a bounded input queue, then a sink thread.

While stage ``k`` computes micro-batch ``i``, stage ``k-1`` computes micro-batch ``i+1``: K stages work on K
micro-batches at once (GPipe-style pipelining applied to inference; bubble (K-1)/(M+K-1) for M micro-batches,
Huang et al. 2019, "GPipe"). The sink (the recognition head, in the worker) runs in one more thread so it
overlaps with the last stage.

Scheduling: at most ``max_in_flight`` micro-batches are between :meth:`StageEngine.submit` and the end of
their sink call (or their failure); ``submit`` blocks while that many are in flight (back-pressure towards the
batcher), on top of the bounded queue before every stage.

Asynchronous stages: an entry of ``stages`` may be an :class:`AsyncStage` (e.g. a stage group in another
process, :class:`vcascade.center.stages.link.RemoteStages`). Its thread only hands micro-batches over; the async stage
hands each back whenever it is done, in any order, and the engine forwards it to the next queue. Every
micro-batch carries its own items, so results never depend on completion order.

Failure isolation: a stage (or the sink) that raises fails only that micro-batch: ``on_error`` is called with
it and the stage keeps serving. Clean stop: :meth:`StageEngine.stop` enqueues a sentinel behind the work
already submitted; it flows through every stage (an async stage first waits for its pending micro-batches),
so everything submitted before it is finished first.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from vcascade.center.intake.microbatch import MicroBatch

log = logging.getLogger(__name__)

StageFn = Callable[[Any], Any]
"""A stage: takes ``MicroBatch.data`` and returns the new ``data`` (runs in the stage's own thread)."""

DoneFn = Callable[[MicroBatch, Sequence[float]], None]
"""``done(batch, compute_s)``: an async stage finished ``batch`` (``data`` and marks set); ``compute_s`` are
the compute times of each pipeline stage it covers, s, in order."""
FailFn = Callable[[MicroBatch, BaseException], None]
"""``fail(batch, exc)``: an async stage gave up on ``batch``."""

DEFAULT_MAX_IN_FLIGHT = 1_000_000
"""``max_in_flight`` when not given: in effect only the stage queues bound the work in flight."""

_STOP = object()


@runtime_checkable
class AsyncStage(Protocol):
    """One or more consecutive pipeline stages computed outside the engine's threads (another process).

    Attributes:
        num_stages: how many pipeline stages it covers (their compute times come back with each micro-batch).
    """

    num_stages: int

    def start(self, done: DoneFn, fail: FailFn) -> None:
        """Start its threads; later call ``done`` or ``fail`` exactly once per micro-batch sent (any thread)."""

    def send(self, batch: MicroBatch) -> None:
        """Hand ``batch`` over (stage thread). Raising fails that micro-batch (``done``/``fail`` not called)."""

    def drain(self, timeout_s: float) -> bool:
        """Wait until every micro-batch sent was answered (done or failed); True if so within ``timeout_s``."""

    def close(self) -> None:
        """Stop its threads and release its sockets (after :meth:`drain`)."""


class StageEngine:
    """Run micro-batches through ``stages`` in pipeline, then hand each to ``sink``.

    Args:
        stages: the stages in order (at least one): :data:`StageFn` callables or :class:`AsyncStage` objects.
        queue_size: bounded input queue length of every stage and of the sink, in micro-batches.
        sink: called with each finished micro-batch, from the sink thread (the only thread calling it).
        on_error: called as ``on_error(micro_batch, where, exc)`` when stage ``where`` (``"stage<k>"``, k the
            pipeline index of the first stage an async stage covers) or the sink (``"head"``) raised on it;
            called from that stage's thread (an async stage's own thread for its failures); must not raise.
        on_compute: optional ``on_compute(stage_index, seconds)`` with each stage call's compute time.
        clock: timestamp source, seconds (``time.perf_counter``).
        max_in_flight: micro-batches between :meth:`submit` and the end of their sink call, at most.
        threads_per_stage: when given, each stage thread calls ``torch.set_num_threads`` with it first (torch
            keeps one intra-op thread count per calling thread, so K stages use K x this many cores).
        first_stage_index: pipeline index of the first stage (a stage group runs stages from there on): names
            (``stage<k>``), ``on_compute`` and ``on_error`` use the recognizer's numbering.

    Raises:
        ValueError: no stages, ``queue_size < 1`` or ``max_in_flight < 1``.
    """

    def __init__(
        self,
        stages: Sequence[StageFn | AsyncStage],
        queue_size: int,
        sink: Callable[[MicroBatch], None],
        on_error: Callable[[MicroBatch, str, BaseException], None],
        on_compute: Callable[[int, float], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        threads_per_stage: int | None = None,
        first_stage_index: int = 0,
    ) -> None:
        if not stages:
            raise ValueError("a stage engine needs at least one stage")
        if queue_size < 1 or max_in_flight < 1:
            raise ValueError(f"queue_size and max_in_flight must be >= 1, got {queue_size}, {max_in_flight}")
        self._stages = list(stages)
        self._first_index = _first_indices(self._stages, first_stage_index)
        self._sink = sink
        self._on_error = on_error
        self._on_compute = on_compute or (lambda index, seconds: None)
        self._clock = clock
        self._threads_per_stage = threads_per_stage
        self._queues: list[queue.Queue] = [queue.Queue(queue_size) for _ in range(len(self._stages) + 1)]
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._in_flight = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def num_stages(self) -> int:
        """K, the number of pipeline stages (an async stage counts its ``num_stages``; the sink not counted)."""
        return self._first_index[-1] - self._first_index[0]

    @property
    def in_flight(self) -> int:
        """Micro-batches submitted and not yet through the sink (or failed)."""
        with self._lock:
            return self._in_flight

    def start(self) -> None:
        """Start the stage threads and the sink thread (daemon threads, named ``stage<k>`` and ``head``)."""
        for position, stage in enumerate(self._stages):
            if isinstance(stage, AsyncStage):
                stage.start(self._async_done(position), self._async_fail(position))
            name = f"stage{self._first_index[position]}"
            thread = threading.Thread(target=self._run_stage, args=(position,), name=name, daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._run_sink, name="head", daemon=True))
        for thread in self._threads:
            thread.start()

    def submit(self, batch: MicroBatch, timeout_s: float | None = None) -> None:
        """Queue a micro-batch for stage 0, blocking while ``max_in_flight`` are in flight or the queue is full.

        Raises:
            queue.Full: still blocked after ``timeout_s`` (the micro-batch was not taken).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._slots.acquire(timeout=timeout_s):
            raise queue.Full(f"{self.in_flight} micro-batches in flight")
        try:
            self._queues[0].put(batch, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except queue.Full:
            self._slots.release()
            raise
        with self._lock:
            self._in_flight += 1

    def queue_depths(self) -> dict[str, int]:
        """Micro-batches waiting before each stage and before the sink, by name (``stage<k>``, ``head``)."""
        names = [f"stage{k}" for k in self._first_index[:-1]] + ["head"]
        return {name: q.qsize() for name, q in zip(names, self._queues)}

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Let the work already submitted finish, then stop every thread (and close async stages).

        Returns:
            True when all threads ended within ``timeout_s`` (in total), False otherwise (they are daemons).
        """
        deadline = time.monotonic() + timeout_s
        try:
            self._queues[0].put(_STOP, timeout=timeout_s)
        except queue.Full:
            return False
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for stage in self._stages:
            if isinstance(stage, AsyncStage):
                stage.close()
        return not any(thread.is_alive() for thread in self._threads)

    # ------------------------------------------------------------------ stage threads

    def _run_stage(self, position: int) -> None:
        if self._threads_per_stage is not None:
            import torch

            torch.set_num_threads(self._threads_per_stage)
        inbox, outbox, stage = self._queues[position], self._queues[position + 1], self._stages[position]
        asynchronous = isinstance(stage, AsyncStage)
        while (batch := inbox.get()) is not _STOP:
            if asynchronous:
                self._hand_over(position, stage, batch)
            elif self._compute(position, stage, batch):
                outbox.put(batch)
        if asynchronous:
            stage.drain(timeout_s=float("inf"))  # its own timeout fails what does not come back
        outbox.put(_STOP)

    def _compute(self, position: int, fn: StageFn, batch: MicroBatch) -> bool:
        index = self._first_index[position]
        started = self._clock()
        try:
            batch.data = fn(batch.data)
        except Exception as exc:  # noqa: BLE001 - a failing stage fails this micro-batch only
            self._fail(batch, index, exc)
            return False
        done = self._clock()
        batch.t_stage_done_s.append(done)
        batch.compute_s.append(done - started)
        self._on_compute(index, done - started)
        return True

    def _hand_over(self, position: int, stage: AsyncStage, batch: MicroBatch) -> None:
        try:
            stage.send(batch)
        except Exception as exc:  # noqa: BLE001 - a refused hand-over fails this micro-batch only
            self._fail(batch, self._first_index[position], exc)

    def _async_done(self, position: int) -> DoneFn:
        first, outbox = self._first_index[position], self._queues[position + 1]

        def done(batch: MicroBatch, compute_s: Sequence[float]) -> None:
            for offset, seconds in enumerate(compute_s):
                self._on_compute(first + offset, seconds)
            outbox.put(batch)

        return done

    def _async_fail(self, position: int) -> FailFn:
        first = self._first_index[position]
        return lambda batch, exc: self._fail(batch, first, exc)

    def _fail(self, batch: MicroBatch, index: int, exc: BaseException) -> None:
        log.warning("stage%d failed on micro-batch %d: %r", index, batch.seq, exc)
        try:
            self._on_error(batch, f"stage{index}", exc)
        finally:
            self._release()

    # ------------------------------------------------------------------ sink thread

    def _run_sink(self) -> None:
        inbox = self._queues[-1]
        while (batch := inbox.get()) is not _STOP:
            try:
                self._sink(batch)
            except Exception as exc:  # noqa: BLE001
                log.warning("head failed on micro-batch %d: %r", batch.seq, exc)
                self._on_error(batch, "head", exc)
            finally:
                self._release()

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self._slots.release()


def _first_indices(stages: Sequence[StageFn | AsyncStage], first: int = 0) -> list[int]:
    """Pipeline index of the first stage of each entry, then the index after the last (async stages cover several)."""
    indices = [first]
    for stage in stages:
        indices.append(indices[-1] + (stage.num_stages if isinstance(stage, AsyncStage) else 1))
    return indices

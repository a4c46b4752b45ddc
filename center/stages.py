"""Stage engine: K pipeline stages, each in its own thread with a bounded input queue, then a sink thread.

While stage ``k`` computes micro-batch ``i``, stage ``k-1`` computes micro-batch ``i+1``: K stages work on K
micro-batches at once (GPipe-style pipelining applied to inference; bubble (K-1)/(M+K-1) for M micro-batches,
Huang et al. 2019, "GPipe"). The sink (the recognition head, in the worker) runs in one more thread so it
overlaps with the last stage.

Failure isolation: a stage (or the sink) that raises fails only that micro-batch: ``on_error`` is called with
it and the stage keeps serving. Clean stop: :meth:`StageEngine.stop` enqueues a sentinel behind the work
already submitted; it flows through every stage, so everything submitted before it is finished first.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Sequence

from center.microbatch import MicroBatch

log = logging.getLogger(__name__)

StageFn = Callable[[Any], Any]
"""A stage: takes ``MicroBatch.data`` and returns the new ``data`` (runs in the stage's own thread)."""

_STOP = object()


class StageEngine:
    """Run micro-batches through ``stages`` in pipeline, then hand each to ``sink``.

    Args:
        stages: the stage callables, in order (at least one).
        queue_size: bounded input queue length of every stage and of the sink, in micro-batches.
        sink: called with each finished micro-batch, from the sink thread (the only thread calling it).
        on_error: called as ``on_error(micro_batch, where, exc)`` when stage ``where`` (``"stage<k>"``) or the
            sink (``"head"``) raised on it; called from that stage's thread; must not raise.
        on_compute: optional ``on_compute(stage_index, seconds)`` with each stage call's compute time.
        clock: timestamp source, seconds (``time.perf_counter``).

    Raises:
        ValueError: no stages, or ``queue_size < 1``.
    """

    def __init__(
        self,
        stages: Sequence[StageFn],
        queue_size: int,
        sink: Callable[[MicroBatch], None],
        on_error: Callable[[MicroBatch, str, BaseException], None],
        on_compute: Callable[[int, float], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not stages:
            raise ValueError("a stage engine needs at least one stage")
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        self._stages = list(stages)
        self._sink = sink
        self._on_error = on_error
        self._on_compute = on_compute or (lambda index, seconds: None)
        self._clock = clock
        self._queues: list[queue.Queue] = [queue.Queue(queue_size) for _ in range(len(self._stages) + 1)]
        self._threads: list[threading.Thread] = []

    @property
    def num_stages(self) -> int:
        """K, the number of stages (the sink not counted)."""
        return len(self._stages)

    def start(self) -> None:
        """Start the K stage threads and the sink thread (daemon threads, named ``stage<k>`` and ``head``)."""
        for index in range(len(self._stages)):
            thread = threading.Thread(target=self._run_stage, args=(index,), name=f"stage{index}", daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._run_sink, name="head", daemon=True))
        for thread in self._threads:
            thread.start()

    def submit(self, batch: MicroBatch, timeout_s: float | None = None) -> None:
        """Queue a micro-batch for stage 0, blocking while its queue is full (back-pressure).

        Raises:
            queue.Full: still full after ``timeout_s``.
        """
        self._queues[0].put(batch, timeout=timeout_s)

    def queue_depths(self) -> dict[str, int]:
        """Micro-batches waiting before each stage and before the sink, by name (``stage<k>``, ``head``)."""
        names = [f"stage{k}" for k in range(len(self._stages))] + ["head"]
        return {name: q.qsize() for name, q in zip(names, self._queues)}

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Let the work already submitted finish, then stop every thread.

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
        return not any(thread.is_alive() for thread in self._threads)

    def _run_stage(self, index: int) -> None:
        inbox, outbox, fn = self._queues[index], self._queues[index + 1], self._stages[index]
        while (batch := inbox.get()) is not _STOP:
            if self._compute(index, fn, batch):
                outbox.put(batch)
        outbox.put(_STOP)

    def _compute(self, index: int, fn: StageFn, batch: MicroBatch) -> bool:
        started = self._clock()
        try:
            batch.data = fn(batch.data)
        except Exception as exc:  # noqa: BLE001 - a failing stage fails this micro-batch only
            log.warning("stage%d failed on micro-batch %d: %r", index, batch.seq, exc)
            self._on_error(batch, f"stage{index}", exc)
            return False
        done = self._clock()
        batch.t_stage_done_s.append(done)
        self._on_compute(index, done - started)
        return True

    def _run_sink(self) -> None:
        inbox = self._queues[-1]
        while (batch := inbox.get()) is not _STOP:
            try:
                self._sink(batch)
            except Exception as exc:  # noqa: BLE001
                log.warning("head failed on micro-batch %d: %r", batch.seq, exc)
                self._on_error(batch, "head", exc)

"""A sink behind a bounded queue with its own delivery thread: a dead or slow sink never slows detection, the broker
link or the other sinks.

Follow one record: the link thread calls :meth:`QueuedSink.write`, which appends it to the queue and returns at once
(a full queue first drops its oldest record, counted as ``queue_full``). The delivery thread takes records in order,
in batches of up to the backend's ``batch_max`` (waiting up to ``batch_wait_s`` for a fuller batch), and hands them
to the backend (:class:`Delivery`: a file, a PUB socket, an MQTT client, a webhook). The backend settles every
record it was given, now or later from another thread (an MQTT PUBACK): delivered, or dropped with a reason. A
backend that waits out an outage (retries, reconnects) holds the delivery thread, so records pile up in the queue
and leave it in order when the outage ends: at-least-once within the bound (a retried batch or a re-sent MQTT
message may arrive twice; records carry ``roi_id`` or ``event_id`` to remove duplicates).

Each record is settled exactly once (:meth:`QueuedSink.settle` ignores a second settlement), so per sink
``emitted = delivered + dropped`` once the queue is empty. At shutdown (:meth:`QueuedSink.begin_close`,
:meth:`QueuedSink.finish_close`) the thread has ``drain_timeout_s`` to deliver what is held; the rest is counted
as ``shutdown``, and records written after the close as ``closed``.

**Books** (:class:`SinkBooks`, one per sink, kept by every backend): records delivered (by status or kind),
dropped (by reason), failed delivery attempts (by reason), and the metrics and log lines that show them. Every
record a sink is given ends exactly once, delivered or dropped with a reason, so that per sink
``emitted = delivered + dropped`` at any quiet moment and at the end (docs/SINKS.md). A failed attempt that will be
retried (a timeout, a refused connection) is not an end: it is counted apart, in
``vcascade_edge_sink_attempts_failed_total``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from vcascade.edge.metrics import EdgeTelemetry

log = logging.getLogger(__name__)

JOIN_GRACE_S = 1.0
"""How long a closing sink waits for its delivery thread after the drain deadline, s (a thread stuck in a
blocking call past it is left behind: it is a daemon, and whatever it settles later is ignored)."""


@dataclass(eq=False, slots=True)
class Entry:
    """One record held by a sink, from :meth:`QueuedSink.write` until it is settled (compared by identity)."""

    record: dict[str, Any]
    settled: bool = False


class Delivery(Protocol):
    """A sink's backend, called on its delivery thread only.

    Attributes:
        books: the sink's counts (shared with the queue: one set of books per sink).
        batch_max: records handed to :meth:`deliver` at once, at most (>= 1).
        batch_wait_s: how long the thread waits for a fuller batch once it holds one record, s.
    """

    books: SinkBooks
    batch_max: int
    batch_wait_s: float

    def deliver(self, batch: list[Entry], ledger: QueuedSink) -> None:
        """Deliver ``batch`` in order, settling each entry through ``ledger.settle`` now or later (any thread).

        May block while an outage lasts (retries, reconnects), but must return soon after
        ``ledger.abandoned`` is set; entries not settled by then are counted as ``shutdown``. Never raises.
        """
        ...

    def close(self) -> None:
        """Release the file, socket or connection (after the last :meth:`deliver`)."""
        ...


def encoded(batch: list[Entry], ledger: QueuedSink) -> list[tuple[Entry, bytes]]:
    """Each entry of ``batch`` with its record as strict JSON (:func:`json_line`); an entry
    whose record JSON cannot hold is settled as ``bad_record`` and left out."""
    out: list[tuple[Entry, bytes]] = []
    for entry in batch:
        try:
            out.append((entry, json_line(entry.record)))
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            ledger.settle([entry], "bad_record", exc)
    return out


class QueuedSink:
    """A :class:`Delivery` backend behind a bounded queue and a delivery thread of its own.

    Implements the edge's ``Sink`` protocol (``write``, ``close``) and ``stats``; :meth:`write` never blocks on the
    backend and never raises.

    Args:
        backend: the delivery backend (its ``books`` carry this sink's label and counts).
        queue_max: records waiting in the queue at most (>= 1); the backend holds at most its batch (or window)
            more.
        drain_timeout_s: at close, how long to wait for held records to be delivered, s.
    """

    def __init__(self, backend: Delivery, queue_max: int, drain_timeout_s: float) -> None:
        self.backend, self.books = backend, backend.books
        self.label = self.books.label
        self.queue_max, self.drain_timeout_s = queue_max, drain_timeout_s
        self.abandoned = threading.Event()
        """Set at the drain deadline: the backend stops retrying and returns."""
        self._cond = threading.Condition()
        self._queue: deque[Entry] = deque()
        self._out: set[Entry] = set()  # taken by the delivery thread, not settled yet
        self._closing = False
        self._deadline_s = 0.0
        self._emitted: dict[str, Any] = {}  # kind -> its bound counter (vcascade_edge_sink_records_emitted_total)
        self.books.telemetry.sink_queue_depth_from(self.label, self.held)
        self._thread = threading.Thread(target=self._run, name=f"sink-{self.label}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ any thread

    def write(self, record: dict[str, Any]) -> None:
        """Queue ``record`` for delivery (returns at once). A full queue drops its oldest record (``queue_full``);
        after :meth:`begin_close` the record is dropped as ``closed``."""
        kind = str(record.get("kind") or "result")
        emitted = self._emitted.get(kind)
        if emitted is None:
            emitted = self._emitted[kind] = self.books.telemetry.sink_records_emitted(self.label, kind)
        emitted.inc()
        with self._cond:
            if self._closing:
                self.books.dropped("closed", "the sink is closed")
                return
            if len(self._queue) >= self.queue_max:
                oldest = self._queue.popleft()
                oldest.settled = True
                self.books.dropped("queue_full", f"{self.queue_max} records held")
            self._queue.append(Entry(record))
            if len(self._queue) == 1 or len(self._queue) == self.backend.batch_max:
                self._cond.notify_all()  # the delivery thread waits only for a first record or a full batch

    def settle(self, entries: Iterable[Entry], reason: str | None = None, exc: BaseException | str | None = None) -> None:
        """End ``entries``: delivered (``reason`` None) or dropped for ``reason``. Entries already settled (by the
        drain deadline, or twice by a backend) are skipped, so each record is counted once."""
        delivered: dict[str, int] = {}
        lost = 0
        with self._cond:
            for entry in entries:
                if entry.settled:
                    continue
                entry.settled = True
                self._out.discard(entry)
                if reason is None:
                    key = delivered_key(entry.record)
                    delivered[key] = delivered.get(key, 0) + 1
                else:
                    lost += 1
            self._cond.notify_all()
        for key, count in delivered.items():
            self.books.delivered(key, count)
        if lost:
            self.books.dropped(reason or "other", exc, lost)

    def held(self) -> int:
        """Records held now: queued, or taken by the backend and not settled."""
        with self._cond:
            return len(self._queue) + len(self._out)

    def wait_held_below(self, count: int, timeout_s: float) -> bool:
        """Wait until fewer than ``count`` records are out with the backend (not settled), or ``timeout_s`` passes,
        or the sink is abandoned; True when below. Used by backends with their own window (MQTT in-flight)."""
        deadline_s = time.monotonic() + timeout_s
        with self._cond:
            while len(self._out) >= count and not self.abandoned.is_set():
                left_s = deadline_s - time.monotonic()
                if left_s <= 0:
                    return False
                self._cond.wait(left_s)
            return len(self._out) < count

    def stats(self) -> dict[str, Any]:
        """``{"written": {status or kind: n}, "lost": {reason: n}, "queued": n, "error": text}`` (any thread)."""
        return {**self.books.stats(), "queued": self.held(), "error": self.books.error}

    def begin_close(self) -> None:
        """Stop taking records; the delivery thread goes on until the queue is empty or ``drain_timeout_s``."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline_s = time.monotonic() + self.drain_timeout_s
            self._cond.notify_all()

    def finish_close(self) -> None:
        """Wait (until the drain deadline) for every held record to be settled, count the rest as ``shutdown``,
        then close the backend."""
        self.begin_close()
        with self._cond:
            while (self._queue or self._out) and time.monotonic() < self._deadline_s:
                self._cond.wait(max(0.0, self._deadline_s - time.monotonic()))
            left = [*self._out, *self._queue]
        self.abandoned.set()
        if left:
            log.warning("sink %s: %d records not delivered within %.1f s of shutdown", self.label, len(left),
                        self.drain_timeout_s)  # fmt: skip
        self.settle(left, "shutdown", "not delivered before the drain deadline")
        with self._cond:
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(JOIN_GRACE_S)
        try:
            self.backend.close()
        except Exception:
            log.exception("sink %s: error while closing", self.label)

    def close(self) -> None:
        """:meth:`begin_close` then :meth:`finish_close` (one sink; :func:`close_sinks` closes several at once)."""
        self.finish_close()

    # ------------------------------------------------------------ delivery thread

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self.backend.deliver(batch, self)
            except Exception as exc:  # a backend's bug must not stop the thread or hide the records it lost
                log.exception("sink %s: unexpected error", self.label)
                self.settle(batch, "other", exc)

    def _next_batch(self) -> list[Entry] | None:
        """Up to ``batch_max`` entries in order (waiting ``batch_wait_s`` for a fuller batch); None at the end."""
        batch_max, wait_s = self.backend.batch_max, self.backend.batch_wait_s
        with self._cond:
            while not self._queue or self.abandoned.is_set():
                if self._closing or self.abandoned.is_set():
                    return None
                self._cond.wait()
            if batch_max > 1 and wait_s > 0:
                until_s = time.monotonic() + wait_s
                while len(self._queue) < batch_max and not self._closing and time.monotonic() < until_s:
                    self._cond.wait(until_s - time.monotonic())
            count = min(batch_max, len(self._queue))
            batch = [self._queue.popleft() for _ in range(count)]
            self._out.update(batch)
            return batch


def close_sinks(sinks: Sequence[Any]) -> None:
    """Close several sinks with one drain wait: every queued sink stops taking records first, then each waits until
    its own deadline (sinks drain at the same time, so the shutdown lasts the longest ``drain_timeout_s``, not
    their sum). Objects without ``begin_close`` are closed with ``close()``."""
    for sink in sinks:
        if hasattr(sink, "begin_close"):
            sink.begin_close()
    for sink in sinks:
        try:
            (sink.finish_close if hasattr(sink, "finish_close") else sink.close)()
        except Exception:
            log.exception("sink %s: error while closing", getattr(sink, "label", type(sink).__name__))


_ENCODER = msgspec.json.Encoder()


def json_line(record: dict[str, Any]) -> bytes:
    """``record`` as one strict JSON (RFC 8259) text, UTF-8, compact, without the newline.

    Floats that are not finite (NaN, +-Infinity) become ``null`` (msgspec's JSON encoding of them).

    Raises:
        TypeError, ValueError, OverflowError, msgspec.EncodeError: ``record`` holds something JSON cannot (a key
            that is not a string, an object of an unsupported type, a string that is not Unicode text).
    """
    return _ENCODER.encode(record)


def delivered_key(record: dict[str, Any]) -> str:
    """The key a delivered record is counted under in :meth:`SinkBooks.stats`: its ``status`` (result lines:
    ``ok``, ``dropped``, ``tracked``), else its ``kind`` (``event``, ``event_update``, ``camera_state``)."""
    return str(record.get("status") or record.get("kind") or "")


EXPLAINED_LOSSES = ("rejected", "retries_exhausted", "bad_record")
"""Loss reasons whose cause becomes the sink's :attr:`SinkBooks.error` (why the receiver refused, the last failed
attempt, what JSON could not hold); the outage behind ``queue_full`` or ``shutdown`` is already there."""


class SinkBooks:
    """Counts of one sink, readable from any thread; logs the start and the end of a loss streak once each (a dead
    disk or broker would otherwise flood the log with one line per record).

    Args:
        edge: the edge's name (metric label).
        label: the sink's name in metrics and snapshots, e.g. ``jsonl[0]``.
    """

    def __init__(self, edge: str, label: str) -> None:
        self.label = label
        self.telemetry = EdgeTelemetry(edge)
        self._lock = threading.Lock()
        self._written: dict[str, int] = {}
        self._lost: dict[str, int] = {}
        self._losing = False
        self.error = ""
        """The last failure of a delivery attempt or connection (human text), '' after a delivery succeeds."""

    def delivered(self, key: str, count: int = 1) -> None:
        """``count`` records delivered (written whole, acknowledged, or answered 2xx), counted under ``key``."""
        with self._lock:
            self._written[key] = self._written.get(key, 0) + count
            resumed, self._losing = self._losing, False
            lost = sum(self._lost.values())
            self.error = ""
        self.telemetry.sink_line_written(self.label, count)
        if resumed:
            log.warning("sink %s delivers again (%d records lost so far)", self.label, lost)

    def dropped(self, reason: str, exc: BaseException | str | None = None, count: int = 1) -> None:
        """``count`` records this sink will never deliver, for ``reason`` (:data:`vcascade.edge.sinks.registry.LOSS_REASONS`)."""
        with self._lock:
            self._lost[reason] = self._lost.get(reason, 0) + count
            started, self._losing = not self._losing, True
            if reason in EXPLAINED_LOSSES and exc:
                self.error = f"{reason}: {exc}"
        self.telemetry.sink_line_lost(self.label, reason, count)
        if started:
            log.error("sink %s loses records (%s%s); counting them until it delivers again", self.label, reason,
                      f": {exc}" if exc else "")  # fmt: skip

    def attempt_failed(self, reason: str, detail: str) -> None:
        """One delivery attempt or connection failed for ``reason`` (``timeout``, ``connection``, ``http_5xx``,
        ``not_authorized``, ...) and will be tried again; ``detail`` (human text) becomes :attr:`error`."""
        with self._lock:
            first = self.error == ""
            self.error = f"{reason}: {detail}"
        self.telemetry.sink_attempt_failed(self.label, reason)
        if first:
            log.warning("sink %s: %s: %s (retrying)", self.label, reason, detail)

    def stats(self) -> dict[str, dict[str, int]]:
        """``{"written": {status or kind: records}, "lost": {reason: records}}`` so far (any thread)."""
        with self._lock:
            return {"written": dict(self._written), "lost": dict(self._lost)}

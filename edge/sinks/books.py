"""The books of one sink: records delivered (by status or kind), dropped (by reason), failed delivery attempts (by
reason), and the metrics and log lines that show them.

Every record a sink is given ends exactly once, delivered or dropped with a reason, so that per sink
``emitted = delivered + dropped`` at any quiet moment and at the end (docs/SINKS.md). A failed attempt that will be
retried (a timeout, a refused connection) is not an end: it is counted apart, in
``vcascade_edge_sink_attempts_failed_total``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import msgspec

from vcascade.edge.metrics import EdgeTelemetry

log = logging.getLogger(__name__)

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

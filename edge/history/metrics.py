"""Prometheus metrics of an edge's history store (``vcascade_history_*``; labels ``edge``, ``camera``).

The books: for each ``kind`` (:data:`~vcascade.edge.history.records.KINDS`), records received = stored + dropped
(by ``reason``: :data:`DROP_REASONS`) once the writer's queue is empty; evidence images offered = written +
dropped. Declared once per process like :mod:`vcascade.edge.metrics`; :class:`HistoryTelemetry` binds them to one
edge.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally

from prometheus_client import Counter, Gauge

DROP_REASONS = ("queue_full", "disk_full", "store_error", "duplicate", "shutdown")
"""Why a record or an image was not kept: the writer's queue was full, the disk or database was full, the store
failed (locked, unreachable, I/O), its id was already stored, or the edge stopped before it was written."""

RECEIVED = Counter(
    "vcascade_history_records_total", "Records handed to the history store, by kind.", ["edge", "camera", "kind"]
)
STORED = Counter(
    "vcascade_history_stored_total", "Records written to the history store, by kind.", ["edge", "camera", "kind"]
)
DROPPED = Counter(
    "vcascade_history_dropped_total", "Records not written to the history store, by kind and reason.",
    ["edge", "camera", "kind", "reason"],
)
IMAGES = Counter(
    "vcascade_history_evidence_images_total", "Evidence images written, by image (crop, frame).",
    ["edge", "camera", "image"],
)
IMAGES_DROPPED = Counter(
    "vcascade_history_evidence_dropped_total", "Evidence images not written, by image and reason.",
    ["edge", "camera", "image", "reason"],
)
EVICTED = Counter(
    "vcascade_history_evicted_total", "Rows retention removed (oldest first), by kind and limit (days, bytes).",
    ["edge", "camera", "kind", "limit"],
)
EVICTED_BYTES = Counter(
    "vcascade_history_evicted_bytes_total", "Bytes (evidence and row estimate) retention freed.", ["edge", "camera"]
)
QUEUE = Gauge("vcascade_history_queue_depth", "Records waiting for the history writer.", ["edge"])
STORE_UP = Gauge("vcascade_history_store_up", "1 while the last write to the history store succeeded.", ["edge"])


class HistoryTelemetry:
    """The history metrics of one edge, one method per event; also tallies its books for the edge's snapshot
    (:meth:`books`). Thread-safe."""

    def __init__(self, edge: str) -> None:
        self.edge = edge
        self._lock = threading.Lock()
        self._stored: Tally[str] = Tally()
        self._dropped: Tally[str] = Tally()
        QUEUE.labels(edge).set(0)

    def books(self) -> dict[str, dict[str, int]]:
        """Records stored by kind and dropped by reason so far: ``{"stored": {...}, "dropped": {...}}``."""
        with self._lock:
            return {"stored": dict(self._stored), "dropped": dict(self._dropped)}

    def received(self, camera: str, kind: str) -> None:
        RECEIVED.labels(self.edge, camera, kind).inc()

    def stored(self, camera: str, kind: str, count: int = 1) -> None:
        STORED.labels(self.edge, camera, kind).inc(count)
        with self._lock:
            self._stored[kind] += count

    def dropped(self, camera: str, kind: str, reason: str, count: int = 1) -> None:
        DROPPED.labels(self.edge, camera, kind, reason).inc(count)
        with self._lock:
            self._dropped[reason] += count

    def image(self, camera: str, image: str) -> None:
        IMAGES.labels(self.edge, camera, image).inc()

    def image_dropped(self, camera: str, image: str, reason: str) -> None:
        IMAGES_DROPPED.labels(self.edge, camera, image, reason).inc()

    def evicted(self, camera: str, kind: str, limit: str, size: int) -> None:
        EVICTED.labels(self.edge, camera, kind, limit).inc()
        EVICTED_BYTES.labels(self.edge, camera).inc(size)

    def queue_depth(self, depth: int) -> None:
        QUEUE.labels(self.edge).set(depth)

    def store_up(self, up: bool) -> None:
        STORE_UP.labels(self.edge).set(1 if up else 0)

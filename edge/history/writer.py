"""The history writer of one edge: the way back's subscriber that keeps results, events and camera states
(docs/HISTORY.md), on its own thread so that detection and the way back never wait for a disk.

:meth:`HistoryWriter.keep` (link thread, camera threads) turns an event into a record and queues it, never blocking:
a full queue drops the record (``queue_full``). The writer thread takes up to ``batch_max`` records at a time, writes
their evidence images (:mod:`vcascade.edge.history.evidence`), then the batch in one transaction; a batch the store
refuses is dropped with the reason (``disk_full``, ``store_error``) and its images removed, and the next batch
tries again (a store that cannot be opened is retried at most every :data:`REOPEN_S`). Every
``retention_interval_s`` it evicts what the limits say (:mod:`vcascade.edge.history.retention`). The books
(:mod:`vcascade.edge.history.metrics`): records received = stored + dropped, per kind and camera.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping

from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.schema.history import HistoryConfig, HistoryLimits
from vcascade.core.state_dir import state_path
from vcascade.edge.history import retention
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.metrics import EdgeTelemetry
from vcascade.edge.history.metrics import HistoryTelemetry
from vcascade.edge.history.records import CameraStateRecord, IdentityLearned, Record, Sighting, record_of
from vcascade.edge.history.postgres_store import PostgresHistory
from vcascade.edge.history.sqlite_store import SqliteHistory
from vcascade.edge.history.store import HistoryStore, StoreDown, StoredEvidence, StoreFull
from vcascade.edge.way_back import WayBackEvent

log = logging.getLogger(__name__)

REOPEN_S = 1.0
"""Least time between two attempts to open a store that failed to open, s."""

LOG_EVERY_S = 60.0
"""A store failing the same way is logged once per this many seconds (every failure is counted)."""

TAKE_TIMEOUT_S = 0.2
"""Longest wait for a first record before the writer looks at its clock (retention, stop), s."""


class HistoryWriter:
    """Keeps the way back's events in a history store (module docstring).

    Args:
        edge: the edge's name (metric label, ``edge`` of the rows).
        cfg: the edge's ``history`` settings.
        cameras: each camera's own retention limits (None: the edge's only).
        open_store: opens the store (on the writer thread); raises :class:`StoreDown` when it cannot.
        evidence: where images go (None: no images).
        clock: wall-clock time in s (retention's now).
    """

    def __init__(
        self, edge: str, cfg: HistoryConfig, cameras: Mapping[str, HistoryLimits | None],
        open_store: Callable[[], HistoryStore], evidence: EvidenceFolder | None, clock: Callable[[], float] = time.time,
    ) -> None:
        self.edge, self.cfg, self.clock = edge, cfg, clock
        self._limits = dict(cameras)
        self._open_store, self.evidence = open_store, evidence
        self.telemetry = HistoryTelemetry(edge)
        self._queue: queue.Queue[Record] = queue.Queue(cfg.queue_max)
        self._stop = threading.Event()
        self._store: HistoryStore | None = None
        self._opened_s = float("-inf")
        self._retained_s = float("-inf")
        self._last_error, self._logged_s = "", float("-inf")
        self._held_lock = threading.Lock()
        self._held_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"history-{edge}", daemon=True)

    # ------------------------------------------------------------ any thread

    def keep(self, event: WayBackEvent) -> None:
        """Queue ``event``'s record, if it makes one (never blocks; a full queue drops it, counted)."""
        record = record_of(self.edge, event)
        if record is None:
            return
        self.telemetry.received(record.camera, record.kind)
        if isinstance(record, Sighting):
            self._hold_images(record)
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._release(record)
            self._drop([record], "queue_full")

    def _hold_images(self, sighting: Sighting) -> None:
        """Keep the sighting's images in the queue only when they will be written and fit
        ``queue_images_max_bytes`` (else they are dropped here, counted ``queue_full``; the row still goes)."""
        if not (self.evidence is not None and sighting.wants_evidence):
            sighting.crop_jpeg, sighting.frame = None, None  # nothing held in the queue that will not be written
            return
        size = image_bytes(sighting)
        with self._held_lock:
            fits = self._held_bytes + size <= self.cfg.queue_images_max_bytes
            if fits:
                self._held_bytes += size
        if not fits:
            for image in images_of(sighting):
                self.telemetry.image_dropped(sighting.camera, image, "queue_full")
            sighting.crop_jpeg, sighting.frame = None, None

    def _release(self, record: Record) -> None:
        """The record's images leave the queue (written, dropped or refused)."""
        if isinstance(record, Sighting):
            size = image_bytes(record)
            if size:
                with self._held_lock:
                    self._held_bytes -= size

    def stats(self) -> dict:
        """For the edge's snapshot: records ``stored`` by kind, ``dropped`` by reason, ``queued`` now."""
        return {**self.telemetry.books(), "queued": self._queue.qsize()}

    def set_limits(self, camera: str, limits: HistoryLimits | None) -> None:
        """A camera added at run time, with its own retention limits (None: the edge's only)."""
        self._limits = {**self._limits, camera: limits}

    def start(self) -> "HistoryWriter":
        self._thread.start()
        return self

    def close(self, timeout_s: float) -> None:
        """Write what is queued for at most ``timeout_s``, then drop the rest (``shutdown``) and close the store."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("edge %s: history writer still busy after %.1f s", self.edge, timeout_s)
        self._drop(self._take_all(), "shutdown")

    # ------------------------------------------------------------ writer thread

    def _run(self) -> None:
        try:
            while True:
                batch = self._take_batch()
                if batch:
                    self._write_counted(batch)
                elif self._stop.is_set():
                    break
                self._retain()
        finally:
            if self._store is not None:
                self._store.close()

    def _take_batch(self) -> list[Record]:
        try:
            batch = [self._queue.get(timeout=0 if self._stop.is_set() else TAKE_TIMEOUT_S)]
        except queue.Empty:
            return []
        while len(batch) < self.cfg.batch_max:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for record in batch:
            self._release(record)
        self.telemetry.queue_depth(self._queue.qsize())
        return batch

    def _take_all(self) -> list[Record]:
        left = []
        while True:
            try:
                left.append(self._queue.get_nowait())
                self._release(left[-1])
            except queue.Empty:
                self.telemetry.queue_depth(0)
                return left

    def _store_now(self) -> HistoryStore:
        """The open store, opened now if needed (at most every :data:`REOPEN_S`: the queue holds the records
        meanwhile). Raises StoreDown: it cannot be opened."""
        if self._store is None:
            wait_s = self._opened_s + REOPEN_S - time.monotonic()
            if wait_s > 0:
                self._stop.wait(wait_s)
            self._opened_s = time.monotonic()
            self._store = self._open_store()
            log.info("edge %s: history store open", self.edge)
        return self._store

    def _write_counted(self, batch: list[Record]) -> None:
        """:meth:`_write`, and a bug in it drops the batch (counted, logged) instead of ending the thread."""
        try:
            self._write(batch)
        except Exception:
            log.exception("edge %s: history batch of %d records dropped", self.edge, len(batch))
            self._drop(batch, "store_error")

    def _write(self, batch: list[Record]) -> None:
        sightings = [r for r in batch if isinstance(r, Sighting)]
        kept = [(s, self._evidence(s)) for s in sightings]
        updates = [r for r in batch if isinstance(r, IdentityLearned)]
        states = [r for r in batch if isinstance(r, CameraStateRecord)]
        try:
            outcome = self._store_now().write(kept, updates, states)
        except StoreDown as exc:
            reason = "disk_full" if isinstance(exc, StoreFull) else "store_error"
            self._failed(exc)
            self._drop(batch, reason)
            self._images(kept, reason)
            return
        self.telemetry.store_up(True)
        duplicates = {id(s) for s in outcome.duplicates}
        for record in batch:
            if id(record) not in duplicates:
                self.telemetry.stored(record.camera, record.kind)
        self._drop(outcome.duplicates, "duplicate")
        self._images([(s, ev) for s, ev in kept if id(s) not in duplicates], None)
        self._images([(s, ev) for s, ev in kept if id(s) in duplicates], "duplicate")

    def _evidence(self, sighting: Sighting) -> StoredEvidence:
        """Write the sighting's images (counting those that fail) and let go of its pixels."""
        if self.evidence is None or not sighting.wants_evidence:
            return StoredEvidence()
        stored, failed = self.evidence.write(sighting)
        for image, reason in failed:
            self.telemetry.image_dropped(sighting.camera, image, reason)
        sighting.crop_jpeg, sighting.frame = None, None
        return stored

    def _images(self, written: list[tuple[Sighting, StoredEvidence]], reason: str | None) -> None:
        """Count the images of rows stored (``reason`` None), or remove those of rows that were not and count them
        dropped with ``reason``."""
        for sighting, stored in written:
            for image, path in (("crop", stored.crop_path), ("frame", stored.frame_path)):
                if path is None:
                    continue
                if reason is None:
                    self.telemetry.image(sighting.camera, image)
                    continue
                if self.evidence is not None:
                    self.evidence.remove([path])
                self.telemetry.image_dropped(sighting.camera, image, reason)

    def _failed(self, exc: Exception) -> None:
        self.telemetry.store_up(False)
        now = time.monotonic()
        if str(exc) != self._last_error or now - self._logged_s >= LOG_EVERY_S:  # down for hours: a line a minute
            log.warning("edge %s: %s (records dropped and counted until it answers)", self.edge, exc)
            self._last_error, self._logged_s = str(exc), now
        if self._store is not None and not isinstance(exc, StoreFull):
            self._store.close()
            self._store = None  # reopened for the next batch (the file may have gone)

    def _drop(self, records: list, reason: str) -> None:
        for record in records:
            self.telemetry.dropped(record.camera, record.kind, reason)

    def _retain(self) -> None:
        now = self.clock()
        if now - self._retained_s < self.cfg.retention_interval_s:
            return
        self._retained_s = now
        try:
            store = self._store_now()
            for row, limit in retention.apply(store, retention.limits(self.cfg, self._limits), now * 1000.0):
                if self.evidence is not None:
                    self.evidence.remove(row.paths)
                self.telemetry.evicted(row.camera, row.kind, limit.kind, row.bytes)
        except StoreDown as exc:
            self._failed(exc)


def images_of(sighting: Sighting) -> list[str]:
    """The images a sighting carries: ``crop`` (a result's JPEG or an event's box) and ``frame`` (an event's)."""
    frame = sighting.frame
    crop = sighting.crop_jpeg is not None or (frame is not None and frame.crop is not None)
    return (["crop"] if crop else []) + (["frame"] if frame is not None else [])


def image_bytes(sighting: Sighting) -> int:
    """Bytes the sighting's images hold in memory (their JPEGs)."""
    size = len(sighting.crop_jpeg) if sighting.crop_jpeg is not None else 0
    if sighting.frame is not None:
        size += len(sighting.frame.annotated.jpeg) + (0 if sighting.frame.crop is None else len(sighting.frame.crop.jpeg))
    return size


def store_opener(cfg: HistoryConfig, readonly: bool = False) -> Callable[[], HistoryStore]:
    """Opens the store ``cfg.store`` names (its ``type``: ``sqlite`` in the history folder, or ``postgres``)."""
    folder = state_path(cfg.path)
    if cfg.store.type == "postgres":
        url = cfg.store.url
        return lambda: PostgresHistory(url, cfg.timeout_s, readonly)
    return lambda: SqliteHistory(folder, cfg.timeout_s, readonly, cfg.file_mode, cfg.dir_mode)


def open_history(settings: EdgeSettings) -> HistoryWriter | None:
    """The started history writer of an edge, on the store its ``history`` names (None: disabled). The store is
    opened by the writer's thread: a server that is down delays nothing here."""
    cfg = settings.edge.history
    if not cfg.enabled:
        return None
    folder = state_path(cfg.path)
    evidence = None
    if cfg.evidence:
        evidence = EvidenceFolder(folder, cfg.file_mode, cfg.dir_mode, EdgeTelemetry(settings.name).image_out)
    cameras = {name: cam.history for name, cam in settings.cameras.items()}
    return HistoryWriter(settings.name, cfg, cameras, store_opener(cfg), evidence).start()


__all__ = ["HistoryWriter", "open_history", "store_opener"]

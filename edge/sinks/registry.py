"""Result sinks: where the edge writes its records: one per ROI (a result, or a counted drop), per ``tracked``
detection, per event and per camera state change (``kind``: ``result``, ``event``, ``event_update``,
``camera_state``).

Registry (:data:`SINKS`) keyed by the config's ``type`` field: ``jsonl`` and ``zmq_pub`` here, ``mqtt``
(:mod:`vcascade.edge.sinks.mqtt`) and ``webhook`` (:mod:`vcascade.edge.sinks.webhook`). :func:`open_sinks` puts every
sink behind its own bounded queue and delivery thread (:mod:`vcascade.edge.sinks.queue`), so the edge's link thread
only appends to a queue and a dead or slow sink slows nothing else. Every sink keeps one contract
(docs/SINKS.md; docs/RELIABILITY.md, "Sinks"):

- **Strict JSON** (RFC 8259): a float that is not finite (NaN, +-Infinity: a worker's similarity, a hop time it
  reported) is written as ``null``. Python's ``json`` module would write ``NaN``, which is not JSON and which
  strict parsers reject; msgspec's encoder writes ``null``.
- **Whole lines only**: a line is encoded in full before anything is written, then written in one call; a short
  write is completed, or, when the rest cannot be written, cut back off the file, so a reader never sees part of
  a line.
- **Never silent**: a record that cannot be delivered is counted per sink and reason
  (``vcascade_edge_sink_lines_lost_total``, :data:`LOSS_REASONS`) and shows in the edge's snapshot with the
  records delivered; the sink tries again with the next record, so it resumes by itself when the cause goes (space
  freed on a full disk, a broker back).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec
import zmq

from vcascade.core.config import JsonlSinkConfig, SecurityConfig, SinkConfig, ZmqPubSinkConfig
from vcascade.core.private_files import open_private
from vcascade.core.transport.disconnects import watch_connections
from vcascade.core.transport.security import secure_server
from vcascade.core.transport.sockets import make_socket
from vcascade.core.transport.zap import start_authenticator
from vcascade.edge.sinks.mqtt import MqttSink
from vcascade.edge.sinks.queue import Delivery, Entry, QueuedSink, SinkBooks, close_sinks, delivered_key, json_line
from vcascade.edge.sinks.webhook import WebhookSink

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Receives finished records (JSON-serialisable dicts with ``kind`` and ``camera``; result records also carry
    ``status``)."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


LOSS_REASONS = (
    "disk_full", "quota", "file_too_large", "read_only", "permission", "closed", "io_error", "bad_record", "other",
    "queue_full", "retries_exhausted", "rejected", "shutdown",
)
"""``reason`` label values of ``vcascade_edge_sink_lines_lost_total``: ``bad_record`` for a record JSON cannot hold
(a bug, not an outage); ``queue_full`` (the queue's bound dropped its oldest record), ``retries_exhausted`` (every
attempt failed), ``rejected`` (the receiver refused it: HTTP 4xx, an MQTT publish refused), ``shutdown`` (still held
at the drain deadline); the others from the error of a write (:data:`ERRNO_REASONS`; ``other`` for the rest)."""

ERRNO_REASONS = {
    errno.ENOSPC: "disk_full", errno.EDQUOT: "quota", errno.EFBIG: "file_too_large", errno.EROFS: "read_only",
    errno.EACCES: "permission", errno.EPERM: "permission", errno.EPIPE: "closed", errno.EBADF: "closed",
    errno.ENOTSOCK: "closed", zmq.ETERM: "closed", errno.EIO: "io_error",
}
"""The loss reason of a failed write, by its ``errno`` (``OSError`` of a file, ``zmq.ZMQError`` of a socket)."""

SUBSCRIBERS = "subscribers"
"""ZAP domain of the PUB sink's socket under CurveZMQ."""


class LineSink:
    """Base of the line sinks (JSONL, ZeroMQ PUB): encodes each record as one strict JSON line, hands it to
    :meth:`_deliver`, and counts it written (by its ``status`` or ``kind``) or lost (by reason). A failed line never
    raises out of :meth:`write`.

    Used directly, :meth:`write` delivers on the caller's thread; :func:`open_sinks` puts the sink behind a
    :class:`~vcascade.edge.sinks.queue.QueuedSink`, which calls :meth:`deliver` on its own thread (this class is a
    :class:`~vcascade.edge.sinks.queue.Delivery` backend, one record at a time).

    Args:
        edge: the edge's name (metric label).
        label: the sink's name in metrics and snapshots: its type and position in the edge's ``sinks`` list,
            e.g. ``jsonl[0]`` (:func:`open_sinks`).
    """

    batch_max = 1
    batch_wait_s = 0.0

    def __init__(self, edge: str, label: str) -> None:
        self.label = label
        self.books = SinkBooks(edge, label)

    def write(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one whole line, or count it lost (by reason) and log the start of a loss streak."""
        reason, exc = self._put(record)
        if reason is None:
            self.books.delivered(delivered_key(record))
        else:
            self.books.dropped(reason, exc)

    def deliver(self, batch: list[Entry], ledger: QueuedSink) -> None:
        """Write each entry's record as one whole line and settle it (the queue's delivery thread)."""
        for entry in batch:
            reason, exc = self._put(entry.record)
            ledger.settle([entry], reason, exc)

    def stats(self) -> dict[str, dict[str, int]]:
        """``{"written": {status: lines}, "lost": {reason: lines}}`` so far (any thread)."""
        return self.books.stats()

    def close(self) -> None:
        """Release the file or socket; lines written afterwards are lost as ``closed``."""

    def _put(self, record: dict[str, Any]) -> tuple[str | None, BaseException | None]:
        """Encode and write one record: ``(None, None)`` when written whole, else ``(loss reason, error)``."""
        try:
            body = json_line(record)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            return "bad_record", exc
        try:
            self._deliver(record, body)
        except (OSError, zmq.ZMQError) as exc:
            return ERRNO_REASONS.get(exc.errno, "other"), exc
        except Exception as exc:  # a sink's bug must not stop the delivery thread or hide the line it lost
            log.exception("sink %s: unexpected error", self.label)
            return "other", exc
        return None, None

    def _deliver(self, record: dict[str, Any], body: bytes) -> None:
        """Write one encoded record (``body``: JSON without newline) whole, or raise ``OSError``/``zmq.ZMQError``
        having written nothing of it."""
        raise NotImplementedError


class JsonlSink(LineSink):
    """Appends (or, with ``mode: truncate``, rewrites) a JSON-lines file, created with ``file_mode`` (0600) in folders
    made with ``dir_mode`` (0700) (:mod:`vcascade.core.private_files`); one line per record, each handed to the
    kernel in one ``write`` call as it comes (no buffer in the process to lose at a crash).

    A write that stops part-way (disk full, file size limit) leaves no partial line: the part written is cut off
    the file again (``ftruncate``) before the loss is counted. One writer per file: the cut assumes the file's end
    is this sink's.

    Raises:
        OSError: the file cannot be created or opened (at construction).
    """

    def __init__(self, cfg: JsonlSinkConfig, ctx: zmq.Context, edge: str = "", label: str = "jsonl") -> None:
        super().__init__(edge, label)
        flags = os.O_WRONLY | os.O_APPEND | (os.O_TRUNC if cfg.mode == "truncate" else 0)
        self._fd = open_private(Path(cfg.path), flags, cfg.file_mode, cfg.dir_mode)  # personal data: 0600 default
        self._torn_bytes = 0  # bytes of a partly written line still at the end of the file (a cut that failed)

    def _deliver(self, record: dict[str, Any], body: bytes) -> None:
        if not self._cut_torn_line():
            raise OSError(errno.EIO, "the part of an earlier line left in the file could not be cut")
        line = memoryview(body + b"\n")
        written = 0
        try:
            while written < len(line):
                count = os.write(self._fd, line[written:])
                if count <= 0:
                    raise OSError(errno.EIO, "write made no progress")
                written += count
        except OSError:
            self._torn_bytes = written
            self._cut_torn_line()
            raise

    def _cut_torn_line(self) -> bool:
        """Cut the part of a line a failed write left at the end of the file; True when no such part is left."""
        if not self._torn_bytes:
            return True
        try:
            os.ftruncate(self._fd, max(0, os.fstat(self._fd).st_size - self._torn_bytes))
        except OSError as exc:
            log.error("sink %s: %d bytes of a torn line could not be cut (%s); retrying before the next line",
                      self.label, self._torn_bytes, exc)  # fmt: skip
            return False
        self._torn_bytes = 0
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, -1  # a later write fails with EBADF (lost as closed), never on a reused number
        if fd >= 0:
            os.close(fd)


class ZmqPubSink(LineSink):
    """Publishes ``[camera][json]`` on a bound PUB socket; subscribers filter by camera name prefix.

    PUB semantics: with no subscriber, or one slower than the high-water mark, ZeroMQ discards messages without
    telling the sender, so ``written`` counts lines handed to ZeroMQ. The JSONL sink and the metrics are the
    accounting record; this sink is a live feed.

    With CurveZMQ on (``security.curve.enabled``) the socket is a CURVE server holding the edge's keypair, and
    only the subscribers whose public keys are in the authorized folder (``subscribers`` names them; None: any
    key there) can connect: the others' handshakes are refused and counted in
    ``vcascade_edge_auth_failures_total``. It runs on a ZeroMQ context of its own, so its ZAP handler is not the
    control socket's. ``vcascade check`` refuses a non-loopback endpoint without CurveZMQ.

    Raises:
        vcascade.core.transport.security.SecurityError: CurveZMQ is on and a key file is missing or malformed.
        zmq.ZMQError: the endpoint cannot be bound.
    """

    def __init__(self, cfg: ZmqPubSinkConfig, ctx: zmq.Context, edge: str = "", label: str = "zmq_pub",
                 security: SecurityConfig | None = None) -> None:  # fmt: skip
        super().__init__(edge, label)
        self._ctx = self._auth = None
        if security is not None and security.curve.enabled:
            self._ctx = ctx = zmq.Context()
            self._auth = start_authenticator(ctx, security)
        self._sock = make_socket(ctx, zmq.PUB)
        try:
            if self._auth is not None:
                secure_server(self._sock, security, edge)
                names = cfg.subscribers if cfg.subscribers is not None else list(self._auth.keys)
                gate = self._auth.admit(self._sock, SUBSCRIBERS, names)
                watch_connections(self._sock, "edge", edge, label, curve=True, refusals=gate.refusal_reason)
            self._sock.bind(cfg.endpoint)
        except BaseException:
            self.close()
            raise

    def _deliver(self, record: dict[str, Any], body: bytes) -> None:
        self._sock.send_multipart([str(record.get("camera", "")).encode(), body], flags=zmq.NOBLOCK)

    def close(self) -> None:
        self._sock.close()
        if self._auth is not None:
            self._auth.stop()
        if self._ctx is not None:
            self._ctx.term()


SINKS: dict[str, Callable[[Any, zmq.Context, str, str], Delivery]] = {
    "jsonl": JsonlSink, "zmq_pub": ZmqPubSink, "mqtt": MqttSink, "webhook": WebhookSink,
}
"""The delivery backend of each sink ``type``: called with (its config, the process's ZeroMQ context, edge name,
label)."""


def open_sinks(
    configs: list[SinkConfig], ctx: zmq.Context, edge: str = "", security: SecurityConfig | None = None
) -> list[QueuedSink]:
    """Open the configured sinks of edge ``edge``, each behind its bounded queue and delivery thread
    (:class:`~vcascade.edge.sinks.queue.QueuedSink`), labelled ``TYPE[INDEX]`` (position in ``configs``).
    ``security``: the deployment's (the ZeroMQ PUB sink uses CurveZMQ when it is on).

    Raises:
        OSError, zmq.ZMQError: a file or endpoint is unusable (sinks opened before it are closed again).
        vcascade.core.transport.security.SecurityError: CurveZMQ is on and a key file is missing or malformed.
    """
    sinks: list[QueuedSink] = []
    try:
        for index, cfg in enumerate(configs):
            label = f"{cfg.type}[{index}]"
            if cfg.type == "zmq_pub":  # the one sink that is a ZeroMQ server
                backend = ZmqPubSink(cfg, ctx, edge, label, security)
            else:
                backend = SINKS[cfg.type](cfg, ctx, edge, label)
            sinks.append(QueuedSink(backend, cfg.queue_max, cfg.drain_timeout_s))
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks

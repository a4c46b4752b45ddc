"""Result sinks: where the edge writes one JSON line per ROI (a result, or a counted drop) and per ``tracked``
detection.

Registry keyed by the config's ``type`` field. Each sink is written from the edge's link thread only; its counts
(:meth:`LineSink.stats`) may be read from any thread. Every sink keeps one contract (docs/RELIABILITY.md, "Sinks"):

- **Strict JSON** (RFC 8259): a float that is not finite (NaN, +-Infinity: a worker's similarity, a hop time it
  reported) is written as ``null``. Python's ``json`` module would write ``NaN``, which is not JSON and which
  strict parsers reject; msgspec's encoder writes ``null``.
- **Whole lines only**: a line is encoded in full before anything is written, then written in one call; a short
  write is completed, or, when the rest cannot be written, cut back off the file, so a reader never sees part of
  a line.
- **Never silent**: a line that cannot be written is counted per sink and reason
  (``vcascade_edge_sink_lines_lost_total``, :data:`LOSS_REASONS`) and shows in the edge's snapshot with the
  lines written; the sink tries again with the next line, so it resumes by itself when the cause goes (space
  freed on a full disk).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any, Protocol

import msgspec
import zmq

from vcascade.core.config import JsonlSinkConfig, SinkConfig, ZmqPubSinkConfig
from vcascade.core.sockets import make_socket
from vcascade.edge.metrics import EdgeTelemetry

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Receives finished records (JSON-serialisable dicts with at least ``camera`` and ``status``)."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


LOSS_REASONS = (
    "disk_full", "quota", "file_too_large", "read_only", "permission", "closed", "io_error", "bad_record", "other",
)
"""``reason`` label values of ``vcascade_edge_sink_lines_lost_total``: ``bad_record`` for a record JSON cannot hold
(a bug, not an outage); the others from the error of the write (:data:`ERRNO_REASONS`; ``other`` for the rest)."""

ERRNO_REASONS = {
    errno.ENOSPC: "disk_full", errno.EDQUOT: "quota", errno.EFBIG: "file_too_large", errno.EROFS: "read_only",
    errno.EACCES: "permission", errno.EPERM: "permission", errno.EPIPE: "closed", errno.EBADF: "closed",
    errno.ENOTSOCK: "closed", zmq.ETERM: "closed", errno.EIO: "io_error",
}
"""The loss reason of a failed write, by its ``errno`` (``OSError`` of a file, ``zmq.ZMQError`` of a socket)."""

_ENCODER = msgspec.json.Encoder()


def json_line(record: dict[str, Any]) -> bytes:
    """``record`` as one strict JSON (RFC 8259) text, UTF-8, compact, without the newline.

    Floats that are not finite (NaN, +-Infinity) become ``null`` (msgspec's JSON encoding of them).

    Raises:
        TypeError, ValueError, OverflowError, msgspec.EncodeError: ``record`` holds something JSON cannot (a key
            that is not a string, an object of an unsupported type, a string that is not Unicode text).
    """
    return _ENCODER.encode(record)


class LineSink:
    """Base of the output sinks: encodes each record as one strict JSON line, hands it to :meth:`_deliver`, and
    counts it written (by its ``status``) or lost (by reason). A failed line never raises out of :meth:`write`.

    Args:
        edge: the edge's name (metric label).
        label: the sink's name in metrics and snapshots: its type and position in the edge's ``sinks`` list,
            e.g. ``jsonl[0]`` (:func:`open_sinks`).
    """

    def __init__(self, edge: str, label: str) -> None:
        self.label = label
        self._telemetry = EdgeTelemetry(edge)
        self._lock = threading.Lock()
        self._written: dict[str, int] = {}
        self._lost: dict[str, int] = {}
        self._losing = False

    def write(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one whole line, or count it lost (by reason) and log the start of a loss streak."""
        try:
            body = json_line(record)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            self._count_lost("bad_record", exc)
            return
        try:
            self._deliver(record, body)
        except (OSError, zmq.ZMQError) as exc:
            self._count_lost(ERRNO_REASONS.get(exc.errno, "other"), exc)
        except Exception as exc:  # a sink's bug must not stop the link thread or hide the line it lost
            log.exception("sink %s: unexpected error", self.label)
            self._count_lost("other", exc)
        else:
            self._count_written(str(record.get("status", "")))

    def stats(self) -> dict[str, dict[str, int]]:
        """``{"written": {status: lines}, "lost": {reason: lines}}`` so far (any thread)."""
        with self._lock:
            return {"written": dict(self._written), "lost": dict(self._lost)}

    def close(self) -> None:
        """Release the file or socket; lines written afterwards are lost as ``closed``."""

    def _deliver(self, record: dict[str, Any], body: bytes) -> None:
        """Write one encoded record (``body``: JSON without newline) whole, or raise ``OSError``/``zmq.ZMQError``
        having written nothing of it."""
        raise NotImplementedError

    def _count_written(self, status: str) -> None:
        with self._lock:
            self._written[status] = self._written.get(status, 0) + 1
            resumed, self._losing = self._losing, False
            lost = sum(self._lost.values())
        self._telemetry.sink_line_written(self.label)
        if resumed:
            log.warning("sink %s writes again (%d lines lost so far)", self.label, lost)

    def _count_lost(self, reason: str, exc: BaseException) -> None:
        with self._lock:
            self._lost[reason] = self._lost.get(reason, 0) + 1
            started, self._losing = not self._losing, True
        self._telemetry.sink_line_lost(self.label, reason)
        if started:  # once per streak, not per line: a full disk would flood the log
            log.error("sink %s loses lines (%s: %s); counting them until it writes again", self.label, reason, exc)


class JsonlSink(LineSink):
    """Appends (or, with ``mode: truncate``, rewrites) a JSON-lines file; one line per record, each handed to the
    kernel in one ``write`` call as it comes (no buffer in the process to lose at a crash).

    A write that stops part-way (disk full, file size limit) leaves no partial line: the part written is cut off
    the file again (``ftruncate``) before the loss is counted. One writer per file: the cut assumes the file's end
    is this sink's.

    Raises:
        OSError: the file cannot be created or opened (at construction).
    """

    def __init__(self, cfg: JsonlSinkConfig, ctx: zmq.Context, edge: str = "", label: str = "jsonl") -> None:
        super().__init__(edge, label)
        path = Path(cfg.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_TRUNC if cfg.mode == "truncate" else 0)
        self._fd = os.open(path, flags, 0o644)
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
    """

    def __init__(self, cfg: ZmqPubSinkConfig, ctx: zmq.Context, edge: str = "", label: str = "zmq_pub") -> None:
        super().__init__(edge, label)
        self._sock = make_socket(ctx, zmq.PUB)
        self._sock.bind(cfg.endpoint)

    def _deliver(self, record: dict[str, Any], body: bytes) -> None:
        self._sock.send_multipart([str(record.get("camera", "")).encode(), body], flags=zmq.NOBLOCK)

    def close(self) -> None:
        self._sock.close()


SINKS: dict[str, type[LineSink]] = {"jsonl": JsonlSink, "zmq_pub": ZmqPubSink}


def open_sinks(configs: list[SinkConfig], ctx: zmq.Context, edge: str = "") -> list[LineSink]:
    """Instantiate the configured sinks of edge ``edge``, labelled ``TYPE[INDEX]`` (position in ``configs``).

    Raises:
        OSError, zmq.ZMQError: a file or endpoint is unusable.
    """
    return [SINKS[cfg.type](cfg, ctx, edge, f"{cfg.type}[{index}]") for index, cfg in enumerate(configs)]

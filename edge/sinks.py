"""Result sinks: where the edge writes one JSON object per ROI (a result, or a counted drop).

Registry keyed by the config's ``type`` field. Each sink is used from the edge's link thread only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import zmq

from vcascade.core.config import JsonlSinkConfig, SinkConfig, ZmqPubSinkConfig
from vcascade.core.sockets import make_socket


class Sink(Protocol):
    """Receives finished ROI records (JSON-serialisable dicts with at least ``camera``)."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends (or, with ``mode: truncate``, rewrites) a JSON-lines file; one line per ROI, flushed per line."""

    def __init__(self, cfg: JsonlSinkConfig, ctx: zmq.Context) -> None:
        path = Path(cfg.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w" if cfg.mode == "truncate" else "a", encoding="utf-8", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


class ZmqPubSink:
    """Publishes ``[camera][json]`` on a bound PUB socket; subscribers filter by camera name prefix.

    PUB semantics: with no subscriber, or one slower than the high-water mark, ZeroMQ discards messages. The
    JSONL sink and the metrics are the accounting record; this sink is a live feed.
    """

    def __init__(self, cfg: ZmqPubSinkConfig, ctx: zmq.Context) -> None:
        self._sock = make_socket(ctx, zmq.PUB)
        self._sock.bind(cfg.endpoint)

    def write(self, record: dict[str, Any]) -> None:
        self._sock.send_multipart([record["camera"].encode(), json.dumps(record).encode()])

    def close(self) -> None:
        self._sock.close()


SINKS: dict[str, type] = {"jsonl": JsonlSink, "zmq_pub": ZmqPubSink}


def open_sinks(configs: list[SinkConfig], ctx: zmq.Context) -> list[Sink]:
    """Instantiate the configured sinks. Raises OSError / zmq.ZMQError when a file or endpoint is unusable."""
    return [SINKS[cfg.type](cfg, ctx) for cfg in configs]

"""The webhook sink against hostile receivers (issue 28, item 3): a real HTTP server on a loopback socket that
answers 1 GiB, or trickles its answer one byte a second (body or headers). The edge reads at most 64 KiB, ends
every attempt at ``deadline_s``, and counts both as failures with their reason; its memory stays bounded."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest
from prometheus_client import REGISTRY

from tests.waiting import until
from vcascade.core.config import WebhookSinkConfig
from vcascade.edge.sinks.queue import QueuedSink
from vcascade.edge.sinks.webhook import ANSWER_MAX_BYTES, WebhookSink

EDGE = "edge-hostile"
GIB = 1 << 30


class HostileReceiver:
    """A real HTTP/1.1 server (raw sockets, one thread per connection): reads each POST whole, then answers
    ``mode``: ``huge-200``/``huge-500`` (1 GiB body of zeros, sent as fast as the client reads), ``trickle-body``
    (headers, then one byte a second), ``trickle-head`` (one header byte a second)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.requests, self.sent_bytes = mode, 0, 0
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook/"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                self._answer(conn)
            except OSError:
                return

    def _answer(self, conn: socket.socket) -> None:
        if self.mode.startswith("huge"):
            status = "200 OK" if self.mode == "huge-200" else "500 Internal Server Error"
            conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: {GIB}\r\nContent-Type: text/plain\r\n\r\n".encode())
            chunk = bytes(1 << 20)
            while self.sent_bytes < GIB and not self.stop.is_set():
                conn.sendall(chunk)
                self.sent_bytes += len(chunk)
            return
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n"
        if self.mode == "trickle-body":
            conn.sendall(answer)
            answer = b"x" * 100000
        for byte in answer:
            if self.stop.wait(1.0):
                return
            conn.sendall(bytes([byte]))

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _failed(sink: str, reason: str) -> float:
    sample = REGISTRY.get_sample_value(
        "vcascade_edge_sink_attempts_failed_total", {"edge": EDGE, "sink": sink, "reason": reason}
    )  # fmt: skip
    return sample or 0.0


@pytest.fixture
def receiver(request):
    made = HostileReceiver(request.param)
    yield made
    made.close()


def _sink(url: str, label: str, **cfg) -> QueuedSink:
    config = WebhookSinkConfig(type="webhook", url=url, backoff_initial_s=0.05, backoff_max_s=0.1, **cfg)
    return QueuedSink(WebhookSink(config, None, EDGE, label), 100, 10.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("receiver", ["huge-200", "huge-500"], indirect=True)
def test_a_1_gib_answer_is_read_to_64_kib_and_counted(receiver):
    label = f"webhook[{receiver.mode}]"
    rss_before = psutil.Process().memory_info().rss
    sink = _sink(receiver.url, label, max_attempts=3, timeout_s=10, deadline_s=30)
    sink.write({"kind": "event", "event_id": "e-1"})
    assert until(lambda: _failed(label, "answer_too_large") >= 3, 60), "three attempts counted as answer_too_large"
    sink.close()
    grown_mb = (psutil.Process().memory_info().rss - rss_before) / 1e6
    assert grown_mb < 100, f"the edge grew by {grown_mb:.0f} MB reading an answer"
    assert receiver.sent_bytes < GIB // 4  # it stopped reading: the receiver could not push the whole GiB
    assert sink.stats()["lost"] == {"retries_exhausted": 1}
    assert ANSWER_MAX_BYTES == 64 * 1024


@pytest.mark.timeout(120)
@pytest.mark.parametrize("receiver", ["trickle-body", "trickle-head"], indirect=True)
def test_an_answer_trickling_one_byte_a_second_ends_at_the_deadline(receiver):
    label = f"webhook[{receiver.mode}]"
    sink = _sink(receiver.url, label, max_attempts=2, timeout_s=5, deadline_s=2.5)
    started = time.monotonic()
    sink.write({"kind": "event", "event_id": "e-1"})
    assert until(lambda: _failed(label, "deadline") >= 2, 60), "two attempts counted as deadline"
    elapsed = time.monotonic() - started
    assert elapsed < 2 * 2.5 + 5, f"two attempts took {elapsed:.1f} s with deadline_s = 2.5"
    assert until(lambda: sink.stats()["lost"] == {"retries_exhausted": 1}, 10), "the batch given up after max_attempts"
    assert "deadline" in sink.stats()["error"]
    sink.close()

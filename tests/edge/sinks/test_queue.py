"""Every sink behind a bounded queue and a delivery thread (edge/sinks/queue.py), on real files and a real pipe: a
dead sink (a FIFO nobody reads: its writes block, as on a hung NFS mount) never slows the writer or another sink,
drops its oldest records counted when its queue is full, and drains in order when its reader returns; at shutdown
the wait is bounded and what is left is counted."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from prometheus_client import REGISTRY

from tests.waiting import until
from vcascade.core.config import JsonlSinkConfig
from vcascade.edge.sinks.queue import QueuedSink, close_sinks
from vcascade.edge.sinks.registry import JsonlSink

EDGE = "edge-queue"


def _record(n: int) -> dict:
    return {"kind": "result", "roi_id": f"r-{n}", "camera": "cam-1", "status": "ok", "n": n, "pad": "x" * 150}


def _sink(path, label: str, queue_max: int, drain_timeout_s: float = 10.0) -> QueuedSink:
    return QueuedSink(JsonlSink(JsonlSinkConfig(type="jsonl", path=str(path)), None, EDGE, label), queue_max,
                      drain_timeout_s)  # fmt: skip


def _metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, {"edge": EDGE, **labels}) or 0.0


FILLER = b"#" * 4095 + b"\n"
"""A line the size of PIPE_BUF, written atomically or not at all."""


@pytest.fixture
def fifo(tmp_path):
    """A FIFO whose pipe is already full (filler lines) and whose reader reads nothing until told: the next write
    blocks."""
    path = tmp_path / "dead.fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    filler = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(filler, FILLER)
    except BlockingIOError:
        pass
    os.close(filler)
    yield path, reader
    try:
        os.close(reader)
    except OSError:
        pass


def test_a_dead_sink_slows_nothing_drops_its_oldest_counted_and_drains_in_order_when_it_returns(tmp_path, fifo):
    path, reader = fifo
    queue_max, total = 50, 2000
    emitted_before = _metric("vcascade_edge_sink_records_emitted_total", sink="dead[0]", kind="result")
    dead = _sink(path, "dead[0]", queue_max)
    good = _sink(tmp_path / "good.jsonl", "good[1]", 10_000)
    started_s = time.perf_counter()
    for n in range(total):
        dead.write(_record(n))
        good.write(_record(n))
    write_s = time.perf_counter() - started_s
    assert until(lambda: good.stats()["written"].get("ok") == total), good.stats()
    stuck = dead.stats()  # the newest records wait; one more is in the blocked write if the thread ran meanwhile
    assert stuck["written"] == {} and stuck["queued"] in (queue_max, queue_max + 1), stuck
    assert stuck["lost"] == {"queue_full": total - stuck["queued"]}, stuck
    assert _metric("vcascade_edge_sink_queue_depth", sink="dead[0]") == stuck["queued"]

    os.set_blocking(reader, True)  # the reader returns
    received = bytearray()
    drainer = threading.Thread(target=lambda: [received.extend(chunk) for chunk in iter(lambda: os.read(reader, 65536), b"")])
    drainer.start()
    assert until(lambda: dead.stats()["queued"] == 0), dead.stats()
    close_sinks([dead, good])
    drainer.join(10)

    assert write_s < 1.0, f"{2 * total} writes took {write_s:.2f} s with one sink dead"
    assert _metric("vcascade_edge_sink_records_emitted_total", sink="dead[0]", kind="result") == emitted_before + total
    assert _metric("vcascade_edge_sink_queue_depth", sink="dead[0]") == 0
    stats = dead.stats()
    delivered, dropped = stats["written"]["ok"], stats["lost"]["queue_full"]
    assert set(stats["lost"]) == {"queue_full"} and delivered + dropped == total
    numbers = [json.loads(line)["n"] for line in received.decode().splitlines() if not line.startswith("#")]
    assert numbers[-queue_max:] == list(range(total - queue_max, total)), "the newest within the bound, in order"
    assert len(numbers) == stuck["queued"] and numbers == sorted(numbers), numbers
    assert delivered == len(numbers)
    assert [json.loads(line)["n"] for line in (tmp_path / "good.jsonl").read_text().splitlines()] == list(range(total))


def test_shutdown_waits_for_the_drain_deadline_and_counts_what_is_left(fifo):
    path, reader = fifo
    dead = _sink(path, "dead[2]", queue_max=10_000, drain_timeout_s=0.3)
    for n in range(1000):
        dead.write(_record(n))
    started_s = time.perf_counter()
    dead.close()
    close_s = time.perf_counter() - started_s
    dead.write(_record(1000))
    os.close(reader)  # the stuck write fails now (EPIPE); the record was counted already, so it stays counted once
    stats = dead.stats()
    assert close_s < 0.3 + 1.5, f"close took {close_s:.2f} s"
    assert stats["written"] == {} and stats["lost"] == {"shutdown": 1000, "closed": 1}, stats
    assert stats["queued"] == 0


def test_a_record_json_cannot_hold_is_counted_and_the_next_is_delivered(tmp_path):
    sink = _sink(tmp_path / "r.jsonl", "bad[3]", 100)
    sink.write(_record(1))
    sink.write({**_record(2), "box": object()})
    sink.write(_record(3))
    sink.close()
    assert sink.stats() == {"written": {"ok": 2}, "lost": {"bad_record": 1}, "queued": 0, "error": ""}
    assert [json.loads(line)["n"] for line in (tmp_path / "r.jsonl").read_text().splitlines()] == [1, 3]

"""The sinks' contract on real files and sockets: strict JSON, whole lines only, every lost line counted by reason,
writing resumes when the cause goes (docs/RELIABILITY.md, "Sinks").

A full disk is played by /dev/full (every write fails with ENOSPC) and by a file size limit (RLIMIT_FSIZE, set in
a child process: a write crossing it stops part-way, then fails with EFBIG), which needs no root and no mount.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from prometheus_client import REGISTRY

from vcascade.core.config import JsonlSinkConfig, ZmqPubSinkConfig
from vcascade.edge.sinks.registry import JsonlSink, json_line, open_sinks

REPO = Path(__file__).resolve().parents[3]
EDGE = "edge-sinks"


def strict_loads(line: str | bytes) -> dict:
    """Parse one line as RFC 8259 JSON: ``NaN``, ``Infinity`` and ``-Infinity`` are refused."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def _record(n: int, **fields) -> dict:
    return {"roi_id": f"r-{n}", "camera": "cam-1", "status": "ok", "n": n, **fields}


def _lost(sink: str, reason: str) -> float:
    return REGISTRY.get_sample_value(
        "vcascade_edge_sink_lines_lost_total", {"edge": EDGE, "sink": sink, "reason": reason}
    ) or 0.0


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_non_finite_numbers_become_null_and_the_rest_is_kept():
    record = _record(1, similarity=math.nan, latency_ms={"stage0": math.inf, "head": -math.inf, "detect": 1.5})
    line = strict_loads(json_line(record))
    assert line["similarity"] is None and line["latency_ms"] == {"stage0": None, "head": None, "detect": 1.5}
    assert line["camera"] == "cam-1" and line["n"] == 1
    assert b"\n" not in json_line({"text": "two\nlines"})  # a newline inside a value is escaped, never raw


def test_every_sink_writes_strict_json(tmp_path, ctx, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    configs = [
        JsonlSinkConfig(type="jsonl", path=str(tmp_path / "r.jsonl")), ZmqPubSinkConfig(type="zmq_pub", endpoint=endpoint)
    ]
    jsonl, pub = open_sinks(configs, ctx, EDGE)
    assert (jsonl.label, pub.label) == ("jsonl[0]", "zmq_pub[1]")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    try:
        record = _record(1, similarity=math.nan, score=math.inf)
        deadline = time.monotonic() + 20.0
        while not sub.poll(50):  # PUB drops until the subscription has arrived: publish until one is received
            assert time.monotonic() < deadline, "no message on the PUB sink"
            pub.write(record)
        topic, body = sub.recv_multipart()
        jsonl.write(record)
    finally:
        sub.close()
        jsonl.close()
        pub.close()
    assert topic == b"cam-1"
    published = strict_loads(body)
    (written,) = [strict_loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert published["similarity"] is None and published["score"] is None
    assert written == published


def test_a_full_disk_loses_lines_counted_by_reason_and_the_other_sinks_go_on(tmp_path, ctx):
    full = JsonlSink(JsonlSinkConfig(type="jsonl", path="/dev/full"), ctx, EDGE, "full[0]")
    good = JsonlSink(JsonlSinkConfig(type="jsonl", path=str(tmp_path / "r.jsonl")), ctx, EDGE, "good[1]")
    before = _lost("full[0]", "disk_full")
    written_before = REGISTRY.get_sample_value(
        "vcascade_edge_sink_lines_written_total", {"edge": EDGE, "sink": "good[1]"}) or 0.0
    for n in range(5):
        full.write(_record(n))
        good.write(_record(n))
    full.close()
    good.close()
    assert full.stats() == {"written": {}, "lost": {"disk_full": 5}}
    assert _lost("full[0]", "disk_full") == before + 5
    assert good.stats() == {"written": {"ok": 5}, "lost": {}}
    assert REGISTRY.get_sample_value(
        "vcascade_edge_sink_lines_written_total", {"edge": EDGE, "sink": "good[1]"}) == written_before + 5
    assert [strict_loads(line)["n"] for line in (tmp_path / "r.jsonl").read_text().splitlines()] == list(range(5))


def test_a_record_json_cannot_hold_is_counted_and_the_file_stays_whole(tmp_path, ctx):
    sink = JsonlSink(JsonlSinkConfig(type="jsonl", path=str(tmp_path / "r.jsonl")), ctx, EDGE, "bad[0]")
    sink.write(_record(1))
    sink.write(_record(2, box=object()))
    sink.write(_record(3))
    sink.close()
    sink.write(_record(4))  # after close: lost as closed, never an exception on the link thread
    assert sink.stats() == {"written": {"ok": 2}, "lost": {"bad_record": 1, "closed": 1}}
    assert [strict_loads(line)["n"] for line in (tmp_path / "r.jsonl").read_text().splitlines()] == [1, 3]


CHILD = """
import json, resource, sys
import zmq
from prometheus_client import REGISTRY
from vcascade.core.config import JsonlSinkConfig
from vcascade.edge.sinks.registry import JsonlSink

path, limit = sys.argv[1], int(sys.argv[2])
sink = JsonlSink(JsonlSinkConfig(type="jsonl", path=path), zmq.Context(), "edge-x", "jsonl[0]")
record = lambda n: {"roi_id": f"r-{n}", "camera": "cam-1", "status": "ok", "n": n, "pad": "x" * 40}  # _record
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))  # SIGXFSZ is ignored: EFBIG
for n in range(30):
    sink.write(record(n))
at_limit = sink.stats()
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # space returns
for n in range(30, 35):
    sink.write(record(n))
sink.close()
lost = REGISTRY.get_sample_value(
    "vcascade_edge_sink_lines_lost_total", {"edge": "edge-x", "sink": "jsonl[0]", "reason": "file_too_large"})
print(json.dumps({"at_limit": at_limit, "end": sink.stats(), "lost_metric": lost}))
"""


def test_a_line_crossing_the_size_limit_is_cut_whole_and_writing_resumes_when_space_returns(tmp_path):
    path = tmp_path / "r.jsonl"
    line_bytes = [len(json_line(_record(n, pad="x" * 40))) + 1 for n in range(11)]  # the child's records
    limit = sum(line_bytes[:10]) + line_bytes[10] // 2  # the 11th line would cross it half-way
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit)], check=False, capture_output=True, text=True, timeout=120,
        cwd=REPO, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.splitlines()[-1])
    assert counts["at_limit"] == {"written": {"ok": 10}, "lost": {"file_too_large": 20}}
    assert counts["end"] == {"written": {"ok": 15}, "lost": {"file_too_large": 20}}
    assert counts["lost_metric"] == 20
    text = path.read_text()
    assert text.endswith("\n")
    assert [strict_loads(line)["n"] for line in text.splitlines()] == [*range(10), *range(30, 35)]  # no torn line

"""The webhook sink against a real HTTP server (stdlib ``http.server`` in a thread): batches of JSON records, a
server that fails (503) and recovers, one that refuses (400), one that hangs (timeouts counted, the writer never
waits), and the ``Authorization`` header from the environment."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.waiting import until
from tests.webhook_receiver import Receiver
from vcascade.core.config import WebhookSinkConfig
from vcascade.edge.sinks.queue import QueuedSink
from vcascade.edge.sinks.webhook import WebhookSink

EDGE = "edge-webhook"


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def _sink(url: str, label: str, queue_max: int = 1000, drain_timeout_s: float = 10.0, **cfg) -> QueuedSink:
    config = WebhookSinkConfig(type="webhook", url=url, backoff_initial_s=0.05, backoff_max_s=0.2, **cfg)
    return QueuedSink(WebhookSink(config, None, EDGE, label), queue_max, drain_timeout_s)


def _event(n: int) -> dict:
    return {"kind": "event", "event_id": f"e-{n}", "camera": "gate", "type": "zone_enter", "n": n}


def _failed(sink: str, reason: str) -> float:
    return REGISTRY.get_sample_value(
        "vcascade_edge_sink_attempts_failed_total", {"edge": EDGE, "sink": sink, "reason": reason}
    ) or 0.0


def test_records_are_posted_in_batches_in_order_with_the_auth_header(receivers, monkeypatch):
    receiver = receivers()
    sink = _sink(receiver.url, "webhook[0]", batch_max=4, batch_wait_s=5.0, auth_header="Bearer s3cret")
    for n in range(10):
        sink.write(_event(n))
    sink.close()  # the last, partial batch goes at close without waiting out batch_wait_s
    assert [len(batch) for batch in receiver.batches] == [4, 4, 2]
    assert [record["n"] for batch in receiver.batches for record in batch] == list(range(10))
    assert {headers["Authorization"] for headers in receiver.headers} == {"Bearer s3cret"}
    assert receiver.headers[0]["Content-Type"] == "application/json"
    assert sink.stats() == {"written": {"event": 10}, "lost": {}, "queued": 0, "error": ""}


def test_a_failing_server_is_retried_with_backoff_and_the_batch_arrives_when_it_recovers(receivers):
    receiver = receivers(statuses=(503, 500, 429))
    before = _failed("webhook[1]", "http_5xx"), _failed("webhook[1]", "http_429")
    sink = _sink(receiver.url, "webhook[1]", batch_max=5, batch_wait_s=0.0)
    for n in range(5):
        sink.write(_event(n))
    assert until(lambda: sink.stats()["written"].get("event") == 5), sink.stats()
    sink.close()
    assert receiver.requests >= 4
    assert [record["n"] for batch in receiver.batches for record in batch] == list(range(5))
    assert (_failed("webhook[1]", "http_5xx"), _failed("webhook[1]", "http_429")) == (before[0] + 2, before[1] + 1)
    assert sink.stats()["lost"] == {}


def test_a_refused_batch_is_counted_rejected_and_exhausted_retries_are_counted(receivers):
    refusing = receivers(statuses=(400,))
    failing = receivers(statuses=(503,) * 3)
    refused = _sink(refusing.url, "webhook[2]", batch_max=3, batch_wait_s=0.0)
    exhausted = _sink(failing.url, "webhook[3]", batch_max=3, batch_wait_s=0.0, max_attempts=3)
    for n in range(3):
        refused.write(_event(n))
        exhausted.write(_event(n))
    refused.close()
    exhausted.close()
    assert refused.stats()["lost"] == {"rejected": 3} and refused.stats()["written"] == {}
    assert refused.stats()["error"].startswith(f"rejected: {refusing.url} refused the batch: HTTP 400"), refused.stats()
    assert exhausted.stats()["error"].startswith("retries_exhausted: 3 sends failed, the last: "), exhausted.stats()
    assert exhausted.stats()["lost"] == {"retries_exhausted": 3} and failing.requests == 3


def test_a_hanging_server_times_out_counted_and_never_holds_the_writer(receivers):
    receiver = receivers(hang=True)
    before = _failed("webhook[4]", "timeout")
    url = receiver.url.replace("http://", "http://edge:s3cret@")  # credentials in the URL: never shown
    sink = _sink(url, "webhook[4]", queue_max=100, drain_timeout_s=0.5, batch_max=10, batch_wait_s=0.0,
                 timeout_s=0.3, max_attempts=1000)  # fmt: skip
    started_s = time.perf_counter()
    for n in range(500):
        sink.write(_event(n))
    write_s = time.perf_counter() - started_s
    assert until(lambda: _failed("webhook[4]", "timeout") >= before + 2)
    assert sink.stats()["error"].startswith("timeout: no answer from http://***@127.0.0.1:"), sink.stats()
    sink.close()
    stats = sink.stats()
    assert write_s < 0.5, f"500 writes took {write_s:.2f} s while the webhook hangs"
    assert stats["written"] == {}
    assert stats["lost"]["queue_full"] + stats["lost"]["shutdown"] == 500, stats

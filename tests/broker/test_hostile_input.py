"""Hostile peers against a real broker loop (issue 17, cases 1 and 5): what used to kill it or leak into labels is
counted under a fixed reason, and the broker keeps serving the honest peers beside it."""

from __future__ import annotations

import time

import msgspec
import pytest

from tests.broker.test_server import answer, recv, send_roi
from tests.hostile import deep_header
from vcascade.core.protocol import wire

pytestmark = pytest.mark.timeout(60)


def _wait_sample(broker, metric: str, value: float, timeout_s: float = 10.0, **labels: str) -> None:
    deadline = time.monotonic() + timeout_s
    while broker.sample(metric, **labels) != value:
        assert broker.thread.is_alive(), "the broker loop died"
        assert time.monotonic() < deadline, f"{metric}{labels} = {broker.sample(metric, **labels)}, not {value}"
        time.sleep(0.05)


def test_a_5_kb_deeply_nested_header_is_counted_too_deep_and_the_broker_keeps_serving(start_broker):
    """Case 1: the version probe raised RecursionError on this header and the broker exited 1."""
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=2)
    hostile_edge, hostile_worker = b.edge("intruder-e"), b.worker("intruder-w")
    hostile_edge.send(deep_header({"kind": "heartbeat", "v": wire.PROTOCOL_VERSION, "sender": "x"}))
    hostile_worker.send(deep_header({"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": "x", "credits": 9}))
    for side in ("frontend", "backend"):
        _wait_sample(b, "vcascade_broker_malformed_messages_total", 1.0, side=side, reason="too_deep")

    send_roi(edge, "r0")
    roi, _ = recv(worker)
    answer(worker, roi)
    result, _ = recv(edge)
    assert isinstance(result, wire.Result) and result.roi_id == "r0" and b.thread.is_alive()


def test_a_made_up_drop_reason_from_a_worker_never_reaches_the_edge(start_broker):
    """Case 5: a worker's invented reasons became Prometheus label values and results.jsonl values at the edge."""
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    roi, _ = recv(worker)
    worker.send(msgspec.msgpack.encode(
        {"kind": "drop", "v": wire.PROTOCOL_VERSION, "roi_id": roi.roi_id, "reason": "pwned_label_1", "where": "w1"}
    ))  # fmt: skip
    _wait_sample(b, "vcascade_broker_malformed_messages_total", 1.0, side="backend", reason="bad_fields")
    assert recv(edge, timeout_s=0.3) is None  # not forwarded; the ROI is still the worker's to answer
    drop = wire.Drop(roi_id=roi.roi_id, reason="stage_error", where="w1")
    worker.send(wire.encode(drop))
    assert recv(edge)[0] == drop

"""The broker loop with real ZeroMQ sockets: a real broker thread, DEALER sockets as edges and workers."""

from __future__ import annotations

import pickle
import time
import urllib.request

import msgspec
import pytest
import zmq
from prometheus_client import REGISTRY

from tests.waiting import until
from vcascade.core.protocol import wire

pytestmark = pytest.mark.timeout(60)

WORKER_HOPS = [("preprocess", 0.25), ("stage0", 0.5)]  # hop names of the closed set (wire.HOP_NAMES)


def make_roi(roi_id: str, camera: str = "cam-1", ttl_ms: float = 0.0, send_reason: str = "") -> wire.Roi:
    return wire.Roi(
        roi_id=roi_id, camera=camera, frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
        xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 32, 44), class_id=0, score=0.9, ttl_ms=ttl_ms,
        send_reason=send_reason,
    )  # fmt: skip


def send_roi(edge: zmq.Socket, roi_id: str, camera: str = "cam-1", ttl_ms: float = 0.0, send_reason: str = "") -> bytes:
    """Send an ROI with a recognisable payload; returns the payload bytes."""
    payload = f"jpeg-bytes-of-{roi_id}".encode()
    edge.send_multipart([wire.encode(make_roi(roi_id, camera, ttl_ms, send_reason)), payload])
    return payload


def recv(sock: zmq.Socket, timeout_s: float = 5.0, heartbeats: bool = False) -> tuple[wire.Message, list[bytes]] | None:
    """One message from a DEALER: (decoded header, payload frames), or None after ``timeout_s``.

    Broker heartbeats are skipped unless ``heartbeats`` is True.
    """
    deadline = time.monotonic() + timeout_s
    while sock.poll(max(0, int((deadline - time.monotonic()) * 1000))):
        frames = sock.recv_multipart()
        _, header, payload = wire.split_message(frames, n_routing=0)
        if heartbeats or not isinstance(header, wire.Heartbeat):
            return header, payload
    return None


def recv_n(sock: zmq.Socket, n: int, timeout_s: float = 5.0) -> list[wire.Message]:
    """Exactly ``n`` headers (fails the test if they do not come within ``timeout_s`` each)."""
    out = []
    for _ in range(n):
        got = recv(sock, timeout_s)
        assert got is not None, f"got {len(out)} of {n} messages: {out}"
        out.append(got[0])
    return out


def answer(worker, roi: wire.Roi) -> None:
    output = wire.EmbeddingOutput(7, 0.9, False)
    worker.send(wire.encode(wire.Result(roi_id=roi.roi_id, worker="w1", output=output, hops=WORKER_HOPS)))


def test_rois_reach_the_worker_and_results_reach_the_right_edge(start_broker):
    b = start_broker()
    worker = b.worker("w1", credits=2)
    edges = {"e1": b.edge("e1"), "e2": b.edge("e2")}
    sent = {}
    for name, edge in edges.items():
        for i in range(3):
            sent[f"{name}-{i}"] = send_roi(edge, f"{name}-{i}", camera=f"cam-{name}")
    for _ in range(6):
        got = recv(worker)
        assert got is not None
        roi, payload = got
        assert isinstance(roi, wire.Roi) and roi == make_roi(roi.roi_id, roi.camera)
        assert payload == [sent[roi.roi_id]]  # forwarded unchanged
        answer(worker, roi)
    for name, edge in edges.items():
        results = recv_n(edge, 3)
        assert sorted(r.roi_id for r in results) == [f"{name}-{i}" for i in range(3)]
        for r in results:
            assert isinstance(r, wire.Result) and r.output == wire.EmbeddingOutput(7, 0.9, False) and r.worker == "w1"
            assert [hop for hop, _ in r.hops] == [
                "preprocess", "stage0", "broker_queue", "transit_broker_worker", "broker_return",
            ]  # fmt: skip
            assert r.hops[:2] == WORKER_HOPS
            assert all(ms >= 0 for _, ms in r.hops)
        assert recv(edge, timeout_s=0.2) is None
    assert b.counted("vcascade_broker_results_total", 6) == 6  # published at the broker's next tick
    assert b.sample("vcascade_broker_rois_dispatched_total") == 6
    assert b.sample("vcascade_broker_rois_received_total", camera="cam-e1") == 3
    assert b.sample("vcascade_broker_queue_seconds_count") == 6
    body = urllib.request.urlopen(f"http://127.0.0.1:{b.cfg.metrics_port}/metrics", timeout=5).read().decode()
    assert f'vcascade_broker_results_total{{broker="{b.name}"}} 6.0' in body


def test_worker_never_holds_more_than_its_credits(start_broker):
    b = start_broker(worker_timeout_s=60)  # this test worker answers slowly and sends no heartbeats
    worker = b.worker("w1", credits=2)
    edge = b.edge("e1")
    for i in range(5):
        send_roi(edge, f"r{i}")
    held, answered, max_held = [], 0, 0
    while answered < 5:
        got = recv(worker, timeout_s=0.5 if len(held) == 2 else 5.0)
        if got is not None:
            held.append(got[0])
            max_held = max(max_held, len(held))
            assert len(held) <= 2, f"worker holds {len(held)} with credits=2"
            continue
        assert held, "nothing held and nothing came"
        answer(worker, held.pop(0))
        answered += 1
    assert max_held == 2
    assert sorted(r.roi_id for r in recv_n(edge, 5)) == [f"r{i}" for i in range(5)]


def test_occupancy_gauges_show_the_rois_a_worker_holds_and_those_waiting(start_broker):
    b = start_broker(worker_timeout_s=60)  # this test worker sends no heartbeats
    worker, edge = b.worker("w1", credits=2), b.edge("e1")
    for i in range(3):
        send_roi(edge, f"r{i}")
    held = recv_n(worker, 2)

    def gauges_reach(expected: tuple[float, float]) -> tuple[float, float]:
        """(in flight, queued) once they read ``expected``, or after 5 s (published about once a second)."""
        deadline = time.monotonic() + 5
        while (now := (b.sample("vcascade_broker_in_flight"), b.sample("vcascade_broker_queue_depth"))) != expected:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return now

    assert gauges_reach((2, 1)) == (2, 1)
    for roi in held:
        answer(worker, roi)
    answer(worker, recv_n(worker, 1)[0])  # the third, dispatched when a credit came back
    assert len(recv_n(edge, 3)) == 3
    assert gauges_reach((0, 0)) == (0, 0)


def test_a_first_sighting_is_dispatched_before_a_refresh_that_came_earlier(start_broker):
    b = start_broker(worker_timeout_s=60)  # this test worker sends no heartbeats
    worker, edge = b.worker("w1", credits=1), b.edge("e1")
    send_roi(edge, "busy", send_reason="first")
    held = recv_n(worker, 1)[0]
    send_roi(edge, "refresh", send_reason="refresh")
    send_roi(edge, "new", send_reason="first")
    deadline = time.monotonic() + 5  # the queue gauge is published about once a second
    while b.sample("vcascade_broker_queue_depth") != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.sample("vcascade_broker_queue_depth") == 2
    answer(worker, held)
    assert recv_n(worker, 1)[0].roi_id == "new"
    answer(worker, make_roi("new"))
    assert recv_n(worker, 1)[0].roi_id == "refresh"


def _reason(frame: bytes) -> str:
    with pytest.raises(wire.MalformedMessage) as info:
        wire.decode(frame)
    return info.value.reason


def test_malformed_messages_are_counted_and_the_broker_keeps_working(start_broker):
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=4)
    garbage, pickled = b"\xc1\xc1 not msgpack", pickle.dumps({"kind": "roi", "roi_id": "x"})
    cases = [
        (edge, [garbage], "frontend", _reason(garbage)),
        (edge, [pickled, b"payload"], "frontend", "pickle"),
        (edge, [wire.encode(wire.Ready(worker="e1", credits=1, recognizer="embed"))], "frontend", "wrong_kind"),
        (edge, [wire.encode(make_roi("two-payloads")), b"a", b"b"], "frontend", "frames"),
        (edge, [b""], "frontend", "empty"),
        (worker, [wire.encode(make_roi("from-worker")), b"jpeg"], "backend", "wrong_kind"),
        (worker, [wire.encode(wire.Ready(worker="w1", credits=-3, recognizer="embed"))], "backend", "bad_credits"),
        (worker, [pickled], "backend", "pickle"),
    ]
    expected: dict[tuple[str, str], int] = {}
    for sock, frames, side, reason in cases:
        sock.send_multipart(frames)
        expected[side, reason] = expected.get((side, reason), 0) + 1
    send_roi(edge, "good")  # behind the bad ones on the same connection
    roi, _ = recv(worker)
    assert roi.roi_id == "good"
    answer(worker, roi)
    assert recv(edge)[0].roi_id == "good"
    for (side, reason), n in expected.items():
        got = b.counted("vcascade_broker_malformed_messages_total", n, side=side, reason=reason)
        assert got == n, (side, reason)
    assert b.counted("vcascade_broker_rois_received_total", 1, camera="cam-1") == 1


def test_a_result_with_a_hostile_head_output_is_counted_and_dropped(start_broker):
    """An unknown head kind, or a classifier output whose labels and scores do not pair up, for an ROI the worker
    really holds: counted as ``bad_fields``, never forwarded; the ROI stays in flight for the real answer."""
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    roi, _ = recv(worker)
    hostile_outputs = [
        {"head": "segmenter", "mask": [1, 0]},
        {"head": "classifier", "labels": ["car", "bus"], "label_scores": [0.9]},
    ]
    for output in hostile_outputs:
        worker.send(msgspec.msgpack.encode({
            "kind": "result", "v": wire.PROTOCOL_VERSION, "roi_id": roi.roi_id, "worker": "w1", "output": output,
        }))  # fmt: skip
    answer(worker, roi)
    (result,) = recv_n(edge, 1)
    assert result.roi_id == "r0" and result.output == wire.EmbeddingOutput(7, 0.9, False)
    assert recv(edge, timeout_s=0.2) is None
    assert b.counted("vcascade_broker_malformed_messages_total", 2, side="backend", reason="bad_fields") == 2
    assert b.counted("vcascade_broker_results_total", 1) == 1


def test_late_or_unknown_answers_are_counted(start_broker):
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    roi, _ = recv(worker)
    answer(worker, roi)
    answer(worker, roi)  # duplicate
    worker.send(wire.encode(wire.Drop(roi_id="never-sent", reason="stage_error", where="w1")))
    assert recv(edge)[0].roi_id == "r0"
    assert recv(edge, timeout_s=0.3) is None
    assert b.counted("vcascade_broker_drops_total", 2, reason="unknown_roi") == 2


def test_worker_drop_is_forwarded_unchanged(start_broker):
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    send_roi(edge, "r1")
    roi, _ = recv(worker)
    drop = wire.Drop(roi_id=roi.roi_id, reason="stage_error", where="w1")
    worker.send(wire.encode(drop))
    assert recv(edge)[0] == drop
    roi, _ = recv(worker)  # the credit came back
    assert roi.roi_id == "r1"


def test_silent_worker_rois_are_redispatched_once_then_dropped(start_broker):
    b = start_broker(worker_timeout_s=0.5)  # max_attempts 2 (default): one re-dispatch
    edge, w1 = b.edge("e1"), b.worker("w1", credits=3)
    for i in range(3):
        send_roi(edge, f"r{i}")
    assert [r.roi_id for r in recv_n(w1, 3)] == ["r0", "r1", "r2"]  # then silence: lost, ROIs re-queued
    assert recv(edge, timeout_s=1.0) is None
    w2 = b.worker("w2", credits=3)
    assert [r.roi_id for r in recv_n(w2, 3)] == ["r0", "r1", "r2"]  # oldest first; then w2 is silent too
    drops = recv_n(edge, 3)
    assert sorted(d.roi_id for d in drops) == ["r0", "r1", "r2"]
    assert all(isinstance(d, wire.Drop) and d.reason == "worker_lost" and d.where == b.name for d in drops)
    assert b.counted("vcascade_broker_drops_total", 3, reason="worker_lost") == 3
    assert b.sample("vcascade_broker_rois_redispatched_total") == 3
    assert b.sample("vcascade_broker_worker_credits", worker="w1") == 0.0  # series removed
    answer(w1, make_roi("r0"))  # the first holder answers late: counted, not forwarded
    deadline = time.monotonic() + 5  # the periodic (not final) report shows it within about a second
    while not any(r["drops"].get("late_result") == 1 for r in b.reports) and time.monotonic() < deadline:
        time.sleep(0.05)
    report = next(r for r in b.reports if r["drops"].get("late_result") == 1)
    assert report["final"] is False and report["workers"] == 0 and report["in_flight"] == 0
    assert (report["received"], report["forwarded"], report["results"]) == (3, 6, 0)
    assert report["redispatched"] == 3 and report["drops"]["worker_lost"] == 3
    assert recv(edge, timeout_s=0.3) is None


def test_worker_bye_requeues_its_rois_at_the_head_and_a_new_worker_takes_over(start_broker):
    b = start_broker()
    edge, w1 = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    send_roi(edge, "r1")
    assert recv(w1)[0].roi_id == "r0"
    w1.send(wire.encode(wire.Bye(sender="w1")))
    assert recv(edge, timeout_s=0.5) is None  # nothing given up: r0 waits for another worker
    w2 = b.worker("w2", credits=1)
    roi, _ = recv(w2)
    assert roi.roi_id == "r0"  # re-dispatched ROIs are the oldest: head of the camera queue
    answer(w1, roi)  # an answer from the departed worker is late: counted, not forwarded
    assert recv(edge, timeout_s=0.3) is None
    answer(w2, roi)
    assert recv(edge)[0].roi_id == "r0"
    roi, _ = recv(w2)
    assert roi.roi_id == "r1"
    answer(w2, roi)
    assert recv(edge)[0].roi_id == "r1"
    assert b.counted("vcascade_broker_drops_total", 1, reason="late_result") == 1
    assert b.sample("vcascade_broker_rois_redispatched_total") == 1


def test_queue_full_drops_the_oldest(start_broker):
    b = start_broker(queue_max=2)
    edge = b.edge("e1")
    for i in range(5):
        send_roi(edge, f"r{i}")
    drops = recv_n(edge, 3)
    assert [(d.roi_id, d.reason) for d in drops] == [("r0", "queue_full"), ("r1", "queue_full"), ("r2", "queue_full")]
    assert b.counted("vcascade_broker_drops_total", 3, reason="queue_full") == 3
    worker = b.worker("w1", credits=5)
    assert [r.roi_id for r in recv_n(worker, 2)] == ["r3", "r4"]


def test_stale_rois_are_dropped_before_dispatch(start_broker):
    b = start_broker()
    edge = b.edge("e1")
    send_roi(edge, "late", ttl_ms=50)
    send_roi(edge, "patient", ttl_ms=0)
    drop = recv(edge)[0]
    assert (drop.roi_id, drop.reason, drop.where) == ("late", "stale", b.name)
    worker = b.worker("w1", credits=5)
    assert recv(worker)[0].roi_id == "patient"


def test_result_for_a_gone_edge_is_counted(start_broker):
    b = start_broker()
    edge, worker = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    roi, _ = recv(worker)
    edge.close(linger=0)
    time.sleep(0.5)  # let the broker's ROUTER notice the disconnect
    answer(worker, roi)
    deadline = time.monotonic() + 5
    while b.sample("vcascade_broker_drops_total", reason="edge_gone") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.sample("vcascade_broker_drops_total", reason="edge_gone") == 1


def test_stop_answers_queued_and_in_flight_rois_then_returns(start_broker):
    b = start_broker(drain_timeout_s=2.0)
    edge, worker = b.edge("e1"), b.worker("w1", credits=2)
    for i in range(5):
        send_roi(edge, f"r{i}")
    held = recv_n(worker, 2)
    assert recv(worker, timeout_s=0.3) is None  # 3 queued
    t0 = time.monotonic()
    b.stop.set()
    queued = recv_n(edge, 3)  # answered first, at once
    assert all(isinstance(a, wire.Drop) and a.reason == "shutdown" for a in queued)
    assert {a.roi_id for a in queued} == {"r0", "r1", "r2", "r3", "r4"} - {h.roi_id for h in held}
    answer(worker, held[0])  # comes back during the drain: forwarded
    result = recv(edge)[0]
    assert isinstance(result, wire.Result) and result.roi_id == held[0].roi_id
    last = recv(edge)[0]  # the unanswered one, after the drain timeout
    assert isinstance(last, wire.Drop) and (last.roi_id, last.reason) == (held[1].roi_id, "shutdown")
    b.thread.join(10)
    assert not b.thread.is_alive()
    assert time.monotonic() - t0 < 5
    assert recv(edge, timeout_s=0.2) is None
    final = b.reports[-1]
    assert final["final"] is True and final["component"] == "broker" and final["name"] == b.name
    assert (final["received"], final["forwarded"], final["results"]) == (5, 2, 1)
    assert final["drops"] == {"shutdown": 4}
    assert (final["queued"], final["in_flight"], final["workers"]) == (0, 0, 1)


def test_the_report_and_the_metrics_are_one_count(start_broker):
    """Each event is counted once, by the broker's telemetry: the final report's totals are the Prometheus
    series of the same run, event for event (results, worker drops, malformed, broker drops, re-dispatches)."""
    b = start_broker(worker_timeout_s=0.5, drain_timeout_s=0.5)
    edge, worker = b.edge("e1"), b.worker("w1", credits=2)
    for i in range(4):
        send_roi(edge, f"r{i}")
    held = recv_n(worker, 2)
    answer(worker, held[0])
    worker.send(wire.encode(wire.Drop(roi_id=held[1].roi_id, reason="stage_error", where="w1")))
    edge.send(b"\xc1 not msgpack")
    worker.send(wire.encode(wire.Drop(roi_id="never-sent", reason="stage_error", where="w1")))
    recv_n(edge, 2)  # the result and the worker's drop
    held = recv_n(worker, 2)  # r2, r3: then the worker goes silent and loses them
    assert until(lambda: b.sample("vcascade_broker_rois_redispatched_total") == 2, timeout_s=10)
    b.shut()
    final = b.reports[-1]
    assert final["final"] and (final["results"], final["worker_drops"], final["redispatched"]) == (1, 1, 2)
    assert final["received"] == b.sample("vcascade_broker_rois_received_total", camera="cam-1") == 4
    assert final["forwarded"] == b.sample("vcascade_broker_rois_dispatched_total") >= 4
    assert final["results"] == b.sample("vcascade_broker_results_total")
    assert final["redispatched"] == b.sample("vcascade_broker_rois_redispatched_total")
    labels = {"broker": b.name, "side": "frontend", "reason": _reason(b"\xc1 not msgpack")}
    malformed = REGISTRY.get_sample_value("vcascade_broker_malformed_messages_total", labels)
    assert final["malformed"] == malformed == 1
    assert final["drops"]["unknown_roi"] == 1 and sum(final["drops"].values()) == 3  # r2, r3 never answered
    for reason, n in final["drops"].items():
        assert b.sample("vcascade_broker_drops_total", reason=reason) == n, reason


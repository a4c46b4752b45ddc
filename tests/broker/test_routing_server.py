"""Routing by recognizer in the real broker loop: real ZeroMQ sockets, DEALERs playing edges and workers."""

from __future__ import annotations

import time

import pytest
import zmq

from vcascade.core.protocol import wire

pytestmark = pytest.mark.timeout(90)


def make_roi(roi_id: str, recognizer: str, ttl_ms: float = 0.0, camera: str = "cam-1") -> wire.Roi:
    return wire.Roi(
        roi_id=roi_id, camera=camera, frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
        xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 32, 44), class_id=0, score=0.9, ttl_ms=ttl_ms,
        recognizer=recognizer,
    )  # fmt: skip


def send_roi(edge: zmq.Socket, roi_id: str, recognizer: str, ttl_ms: float = 0.0) -> None:
    edge.send_multipart([wire.encode(make_roi(roi_id, recognizer, ttl_ms)), f"jpeg-{roi_id}".encode()])


def worker(b, ident: str, recognizer: str, credits: int) -> zmq.Socket:
    sock = b.worker(ident)
    ready(sock, ident, recognizer, credits)
    return sock


def ready(sock: zmq.Socket, ident: str, recognizer: str, credits: int) -> None:
    sock.send(wire.encode(wire.Ready(worker=ident, credits=credits, recognizer=recognizer)))


def recv(sock: zmq.Socket, timeout_s: float = 5.0) -> wire.Message | None:
    """One header from a DEALER (broker heartbeats skipped), or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while sock.poll(max(0, int((deadline - time.monotonic()) * 1000))):
        _, header, _ = wire.split_message(sock.recv_multipart(), n_routing=0)
        if not isinstance(header, wire.Heartbeat):
            return header
    return None


def recv_n(sock: zmq.Socket, n: int, quiet_s: float = 0.5) -> list[wire.Message]:
    """Exactly ``n`` headers (each may take 10 s: the machine is shared), then none for ``quiet_s``."""
    out = []
    for _ in range(n):
        got = recv(sock, 10.0)
        assert got is not None, f"got {len(out)} of {n}: {out}"
        out.append(got)
    extra = recv(sock, quiet_s)
    assert extra is None, f"unexpected {extra}"
    return out


def answer(sock: zmq.Socket, roi: wire.Roi, name: str) -> None:
    sock.send(wire.encode(wire.Result(roi_id=roi.roi_id, worker=name, hops=[("stage0", 1.0)])))


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_each_roi_reaches_only_a_worker_of_its_recognizer(start_broker):
    b = start_broker(worker_timeout_s=60)
    text, embed = worker(b, "text-1", "text", 10), worker(b, "embed-1", "embed", 10)
    edge = b.edge("e1")
    time.sleep(0.3)  # both registered before the ROIs arrive
    for i in range(4):
        send_roi(edge, f"t{i}", "text")
        send_roi(edge, f"e{i}", "embed")
    for sock, name, prefix in ((text, "text-1", "t"), (embed, "embed-1", "e")):
        got = recv_n(sock, 4)
        assert sorted(r.roi_id for r in got) == [f"{prefix}{i}" for i in range(4)]
        assert all(r.recognizer == name.split("-")[0] for r in got)
        for r in got:
            answer(sock, r, name)
    results = recv_n(edge, 8)
    assert sorted((r.roi_id, r.worker) for r in results) == sorted(
        [(f"t{i}", "text-1") for i in range(4)] + [(f"e{i}", "embed-1") for i in range(4)]
    )
    assert b.counted("vcascade_broker_recognizer_rois_dispatched_total", 4, recognizer="text") == 4
    assert b.sample("vcascade_broker_recognizer_rois_dispatched_total", recognizer="embed") == 4
    assert wait_for(lambda: b.sample("vcascade_broker_recognizer_workers", recognizer="text") == 1)
    assert b.sample("vcascade_broker_recognizer_workers", recognizer="embed") == 1


def test_rois_waiting_for_a_busy_recognizer_do_not_block_another(start_broker):
    b = start_broker(worker_timeout_s=60)
    text, embed = worker(b, "text-1", "text", 1), worker(b, "embed-1", "embed", 10)
    edge = b.edge("e1")
    time.sleep(0.3)
    for i in range(20):  # the busy recognizer's ROIs arrive first, same camera
        send_roi(edge, f"t{i}", "text")
    for i in range(3):
        send_roi(edge, f"e{i}", "embed")
    assert sorted(r.roi_id for r in recv_n(embed, 3)) == ["e0", "e1", "e2"]  # while text-1 holds t0 unanswered
    (held,) = recv_n(text, 1)
    assert held.roi_id == "t0"
    assert wait_for(lambda: b.sample("vcascade_broker_recognizer_queue_depth", recognizer="text") == 19)
    answer(text, held, "text-1")
    assert recv(text).roi_id == "t1"


def test_rois_for_a_recognizer_nobody_runs_are_dropped_as_no_worker(start_broker):
    b = start_broker(worker_timeout_s=60)
    embed = worker(b, "embed-1", "embed", 10)
    edge = b.edge("e1")
    time.sleep(0.3)
    send_roi(edge, "ocr-0", "ocr", ttl_ms=300)
    send_roi(edge, "e0", "embed", ttl_ms=300)
    assert recv(embed).roi_id == "e0"
    drop = recv(edge, timeout_s=5.0)
    assert isinstance(drop, wire.Drop) and (drop.roi_id, drop.reason, drop.where) == ("ocr-0", "no_worker", b.name)
    assert b.counted("vcascade_broker_drops_total", 1, reason="no_worker") == 1


def test_rois_without_a_deadline_for_a_recognizer_nobody_runs_are_dropped_as_no_worker(start_broker):
    """Issue 18: without ``ttl_ms`` they stayed queued until the edge gave up on them as ``timeout``."""
    b = start_broker(worker_timeout_s=60, config={"no_worker_wait_s": 0.5})
    embed = worker(b, "embed-1", "embed", 10)
    edge = b.edge("e1")
    time.sleep(0.3)
    sent_s = time.monotonic()
    send_roi(edge, "ocr-0", "ocr")
    send_roi(edge, "e0", "embed")
    assert recv(embed).roi_id == "e0"
    drop = recv(edge, timeout_s=5.0)
    assert isinstance(drop, wire.Drop) and (drop.roi_id, drop.reason, drop.where) == ("ocr-0", "no_worker", b.name)
    assert time.monotonic() - sent_s >= 0.5  # it waited its no_worker_wait_s for a worker first
    assert b.counted("vcascade_broker_drops_total", 1, reason="no_worker") == 1


def test_a_ready_with_another_recognizer_is_counted_and_ignored(start_broker):
    b = start_broker(worker_timeout_s=60)
    sock = worker(b, "w1", "embed", 5)
    edge = b.edge("e1")
    time.sleep(0.3)
    ready(sock, "w1", "text", 5)
    assert wait_for(
        lambda: b.sample("vcascade_broker_malformed_messages_total", side="backend", reason="recognizer_changed") == 1
    )
    send_roi(edge, "t0", "text", ttl_ms=300)
    send_roi(edge, "e0", "embed")
    assert [r.roi_id for r in recv_n(sock, 1)] == ["e0"]  # still an embed worker
    drop = recv(edge)
    assert isinstance(drop, wire.Drop) and (drop.roi_id, drop.reason) == ("t0", "no_worker")


def test_a_lost_workers_rois_go_to_another_worker_of_the_same_recognizer(start_broker):
    b = start_broker(worker_timeout_s=60)
    first, other = worker(b, "embed-1", "embed", 5), worker(b, "text-1", "text", 5)
    edge = b.edge("e1")
    time.sleep(0.3)
    for i in range(3):
        send_roi(edge, f"e{i}", "embed")
    assert [r.roi_id for r in recv_n(first, 3)] == ["e0", "e1", "e2"]
    first.send(wire.encode(wire.Bye(sender="embed-1")))
    assert wait_for(lambda: b.sample("vcascade_broker_rois_redispatched_total") == 3)
    assert recv_n(other, 0) == []  # the idle text worker never takes them
    second = worker(b, "embed-2", "embed", 5)
    got = recv_n(second, 3)
    assert [r.roi_id for r in got] == ["e0", "e1", "e2"]
    assert all(r == make_roi(r.roi_id, "embed") for r in got)  # forwarded as the edge sent it
    for r in got:
        answer(second, r, "embed-2")
    assert sorted((r.roi_id, r.worker) for r in recv_n(edge, 3)) == [(f"e{i}", "embed-2") for i in range(3)]

"""Broker reliability over real ZeroMQ sockets: heartbeats, lost workers, deadlines passed on, bounded labels,
slow workers, and a flood of malformed input."""

from __future__ import annotations

import pickle
import random
import time

import msgspec
import pytest
import zmq

import vcascade.broker.metrics as broker_metrics
from tests.broker.test_routing_server import wait_for
from tests.broker.test_server import answer, make_roi, recv, recv_n, send_roi
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket

pytestmark = pytest.mark.timeout(120)


def _heartbeats(sock: zmq.Socket, window_s: float, enough: int | None = None) -> list[wire.Heartbeat]:
    """Every Heartbeat received in the next ``window_s`` seconds, or the first ``enough`` of them (other messages
    are ignored)."""
    got, end = [], time.monotonic() + window_s
    while (left := end - time.monotonic()) > 0 and (enough is None or len(got) < enough):
        message = recv(sock, timeout_s=left, heartbeats=True)
        if message is not None and isinstance(message[0], wire.Heartbeat):
            got.append(message[0])
    return got


def test_broker_heartbeats_its_workers_and_the_edges_it_heard_from_recently(start_broker):
    b = start_broker(heartbeat_s=0.1, worker_timeout_s=60)  # edges are heartbeated for 0.3 s after a message
    worker, talker, mute = b.worker("w1", credits=1), b.edge("talker"), b.edge("mute")
    talker.send(wire.encode(wire.Heartbeat(sender="talker")))
    heard = _heartbeats(talker, 10.0, enough=1)  # however late the broker's thread runs, it heartbeats...
    assert len(heard) == 1
    assert len(heard + _heartbeats(talker, 0.5)) <= 5  # ...only for the liveness window after the message
    assert _heartbeats(talker, 0.5) == []  # (checked when it sends), then it is silent
    beats = _heartbeats(worker, 10.0, enough=5)
    assert len(beats) == 5 and all(beat.sender == b.name for beat in beats)
    assert _heartbeats(mute, 0.1) == []  # never heard from: never heartbeated
    send_roi(talker, "r0")  # any message makes an edge live again
    assert _heartbeats(talker, 10.0, enough=1)


def test_worker_silent_for_the_liveness_window_of_the_config_is_lost(start_broker):
    b = start_broker(heartbeat_s=0.1)  # liveness 3: a worker silent for 0.3 s is lost
    edge, w1 = b.edge("e1"), b.worker("w1", credits=1)
    send_roi(edge, "r0")
    assert recv(w1)[0].roi_id == "r0"
    w2 = b.worker("w2", credits=1)
    for _ in range(10):  # w2 heartbeats with Ready, w1 says nothing
        w2.send(wire.encode(wire.Ready(worker="w2", credits=1, recognizer="embed")))
        time.sleep(0.05)
    roi, _ = recv(w2)
    assert roi.roi_id == "r0" and b.sample("vcascade_broker_rois_redispatched_total") == 1
    answer(w2, roi)
    assert recv(edge)[0].roi_id == "r0"


def test_killed_worker_is_noticed_by_its_disconnect_and_the_survivor_takes_its_rois(start_broker):
    b = start_broker(heartbeat_s=0.1, worker_timeout_s=60)  # detection by ROUTER_MANDATORY, not by silence
    edge, w1, w2 = b.edge("e1"), b.worker("w1", credits=3), b.worker("w2", credits=3)
    for i in range(6):
        send_roi(edge, f"r{i}")
    held_by_w1 = [r.roi_id for r in recv_n(w1, 3)]
    held_by_w2 = recv_n(w2, 3)
    w1.close(linger=0)  # as a kill -9 would: the TCP connection goes away
    for roi in held_by_w2:
        answer(w2, roi)
    taken_over = recv_n(w2, 3, timeout_s=10)
    assert sorted(r.roi_id for r in taken_over) == sorted(held_by_w1)
    for roi in taken_over:
        answer(w2, roi)
    answers = recv_n(edge, 6)
    assert sorted(a.roi_id for a in answers) == [f"r{i}" for i in range(6)]  # each exactly once
    assert all(isinstance(a, wire.Result) for a in answers)
    assert recv(edge, timeout_s=0.3) is None
    assert b.sample("vcascade_broker_rois_redispatched_total") == 3
    assert wait_for(lambda: b.sample("vcascade_broker_send_failures_total", side="backend", reason="unreachable") >= 1)


def test_the_remaining_deadline_is_passed_on_to_the_worker(start_broker):
    b = start_broker(heartbeat_s=0.1, worker_timeout_s=60)
    edge = b.edge("e1")
    send_roi(edge, "deadline", ttl_ms=3000)
    sent_plain = wire.encode(make_roi("plain"))
    edge.send_multipart([sent_plain, b"jpeg"])
    # Both queued (no worker yet): the broker stamped their arrival before this shows them, so from here on
    # every second the test waits is queue wait, however late the broker's thread got to run.
    assert wait_for(lambda: b.sample("vcascade_broker_queue_depth") == 2)
    time.sleep(0.5)
    worker = b.worker("w1", credits=2)
    got = {}
    for _ in range(2):
        assert worker.poll(5000)
        frames = worker.recv_multipart()
        header = wire.decode(frames[0])
        got[header.roi_id] = (header, frames[0])
    header, _ = got["deadline"]
    assert 0 < header.ttl_ms <= 3000 - 450, header.ttl_ms  # the time spent queued here is taken off
    assert msgspec.structs.replace(header, ttl_ms=3000) == make_roi("deadline", ttl_ms=3000)  # all else kept
    assert got["plain"][1] == sent_plain  # no deadline: the header is forwarded byte for byte


def test_camera_labels_are_bounded_and_the_rest_folded_into_other(start_broker, monkeypatch):
    monkeypatch.setattr(broker_metrics, "MAX_CAMERA_LABELS", 3)
    b = start_broker()
    edge = b.edge("e1")
    cameras = ["c1", "c2", "c3", "c4", "c5", "c1"]
    for i, camera in enumerate(cameras):
        send_roi(edge, f"r{i}", camera=camera)
    bad = {**msgspec.to_builtins(make_roi("r-bad")), "camera": "not a valid name!"}  # as a peer may write it
    edge.send_multipart([msgspec.msgpack.encode(bad), b"jpeg"])  # not a config name: refused at decode, never a label
    assert wait_for(lambda: b.sample("vcascade_broker_queue_bytes") > 0)  # the ROIs wait for a worker
    worker = b.worker("w1", credits=10)
    recv_n(worker, len(cameras))
    assert wait_for(lambda: b.sample("vcascade_broker_queue_bytes") == 0)
    assert b.counted("vcascade_broker_malformed_messages_total", 1, side="frontend", reason="bad_fields") == 1
    assert b.counted("vcascade_broker_rois_received_total", 2, camera="other") == 2  # published at the next tick
    counted = {c: b.sample("vcascade_broker_rois_received_total", camera=c) for c in ("c1", "c2", "c3", "c4")}
    assert counted == {"c1": 2, "c2": 1, "c3": 1, "c4": 0}
    assert b.sample("vcascade_broker_rois_received_total", camera="other") == 2
    assert b.sample("vcascade_broker_malformed_messages_total", side="frontend", reason="bad_fields") == 1


def test_a_slow_worker_receives_less_work_than_a_fast_one(start_broker):
    """Credit-based dispatch over real sockets: the slow worker (answers 50 ms after receipt) holds its credits
    longer, so the least-loaded choice sends most ROIs to the fast worker (answers at once).

    Regression: under load the ROIs reached the broker before the slow worker's Ready, so the fast worker took
    all 120 (``{'fast': 120, 'slow': 0}``); the ROIs are now sent once the broker shows both workers' credits."""
    b = start_broker(worker_timeout_s=60)
    edge, fast, slow = b.edge("e1"), b.worker("fast", credits=2), b.worker("slow", credits=2)
    assert wait_for(lambda: all(b.sample("vcascade_broker_worker_credits", worker=w) == 2 for w in ("fast", "slow")))
    total = 120
    for i in range(total):
        send_roi(edge, f"r{i}", camera=f"cam-{i % 3}")
    counts, held_by_slow, answered = {"fast": 0, "slow": 0}, [], 0
    deadline = time.monotonic() + 60
    while answered < total and time.monotonic() < deadline:
        for name, sock in (("fast", fast), ("slow", slow)):
            while (got := recv(sock, timeout_s=0.001)) is not None:
                counts[name] += 1
                if name == "fast":
                    answer(fast, got[0])
                    answered += 1
                else:
                    held_by_slow.append((time.monotonic(), got[0]))
        while held_by_slow and time.monotonic() - held_by_slow[0][0] >= 0.05:
            answer(slow, held_by_slow.pop(0)[1])
            answered += 1
    assert answered == total
    assert sorted(r.roi_id for r in recv_n(edge, total)) == sorted(f"r{i}" for i in range(total))
    assert counts["fast"] + counts["slow"] == total
    assert counts["fast"] > 3 * counts["slow"] > 0, counts


def _malformed_messages(rng: random.Random, n: int) -> list[tuple[str, list[bytes]]]:
    """``n`` bad messages as (side, frames): random bytes, pickles, other versions, wrong frame counts,
    oversized headers, wrong kinds, wrongly typed fields."""
    good_roi = msgspec.to_builtins(make_roi("x"))
    makers = [
        lambda: ("frontend", [rng.randbytes(rng.randint(1, 200))]),
        lambda: ("backend", [rng.randbytes(rng.randint(1, 200))]),
        lambda: ("frontend", [pickle.dumps({"kind": "roi", "roi_id": "p"}, protocol=rng.randint(0, 5)), b"j"]),
        lambda: ("backend", [pickle.dumps(("ready", rng.random()), protocol=rng.randint(2, 5))]),
        lambda: ("frontend", [msgspec.msgpack.encode({**good_roi, "v": rng.choice([0, wire.PROTOCOL_VERSION - 1, wire.PROTOCOL_VERSION + 1, 99])}), b"jpeg"]),
        lambda: ("frontend", [wire.encode(make_roi("no-payload"))]),
        lambda: ("frontend", [wire.encode(make_roi("3-payloads")), b"a", b"b", b"c"]),
        lambda: ("backend", [wire.encode(wire.Result(roi_id="r", worker="w")), b"extra"]),
        lambda: ("frontend", [b"\x81\xa1v\x01" + b"\x00" * (wire.MAX_HEADER_BYTES + 1), b"jpeg"]),
        lambda: ("frontend", [wire.encode(wire.Result(roi_id="r", worker="w"))]),
        lambda: ("backend", [wire.encode(make_roi("from-worker")), b"jpeg"]),
        lambda: ("backend", [wire.encode(wire.Ready(worker="w", credits=rng.choice([-1, 10**9]), recognizer="embed"))]),
        lambda: ("frontend", [msgspec.msgpack.encode({**good_roi, "frame_seq": "seven"}), b"jpeg"]),
        lambda: ("frontend", [b""]),
    ]
    return [rng.choice(makers)() for _ in range(n)]


def test_a_thousand_malformed_messages_leave_the_broker_serving(start_broker):
    b = start_broker(worker_timeout_s=60)
    edge, worker = b.edge("e1"), b.worker("w1", credits=4)
    sockets = {"frontend": edge, "backend": worker}
    bad = _malformed_messages(random.Random(4), 1000)
    for side, frames in bad:
        sockets[side].send_multipart(frames)
    giant = make_socket(zmq.Context.instance(), zmq.DEALER, identity="giant")  # beyond MAXMSGSIZE: ZeroMQ
    giant.connect(b.cfg.endpoint("frontend"))  # itself cuts the connection; the broker never sees it
    giant.send_multipart([wire.encode(make_roi("giant")), b"\0" * (17 * 1024 * 1024)])
    b.sockets.append(giant)
    send_roi(edge, "good")  # behind all of them on the same connection
    roi, _ = recv(worker, timeout_s=30)
    assert roi.roi_id == "good"
    answer(worker, roi)
    result = recv(edge, timeout_s=10)[0]
    assert isinstance(result, wire.Result) and result.roi_id == "good"
    def total() -> float:
        return sum(
            b.sample("vcascade_broker_malformed_messages_total", side=side, reason=reason)
            for side in ("frontend", "backend")
            for reason in ("empty", "too_large", "pickle", "not_msgpack", "bad_fields", "version", "frames",
                           "wrong_kind", "bad_credits")
        )  # fmt: skip

    wait_for(lambda: total() == len(bad))  # published at the broker's next tick
    assert total() == len(bad)
    assert b.counted("vcascade_broker_rois_received_total", 1, camera="cam-1") == 1
    assert b.thread.is_alive()

"""The broker's bounds in the real loop (real ZeroMQ sockets): 1024 fake workers that never answer, and label values
taken from peers."""

from __future__ import annotations

import time

import msgspec
import pytest
import zmq

import vcascade.broker.metrics as broker_metrics
from tests.broker.test_routing_server import wait_for
from tests.broker.test_server import answer, recv, recv_n, send_roi
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket

pytestmark = pytest.mark.timeout(120)

FAKES = 1024
"""As many fakes as the broker registers workers by default (``BrokerConfig.max_workers``)."""


def ready(sock: zmq.Socket, name: str, credits: int) -> None:
    """A Ready as a peer writes it: the name as given (``wire.Ready`` itself refuses a name that is none)."""
    sock.send(msgspec.msgpack.encode({"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": name, "credits": credits,
                                      "recognizer": "embed"}))  # fmt: skip


def test_a_restarted_worker_registers_within_one_heartbeat_interval_beside_1024_fakes_holding_every_slot(
    start_broker,
):
    """Issue 17, case 4: fakes that announce credits and never answer held every slot; a real worker was refused."""
    heartbeat_s = 0.5
    b = start_broker(heartbeat_s=heartbeat_s, worker_timeout_s=60, config={"answer_timeout_s": 3.0})
    ctx = zmq.Context()  # the fakes' own: more sockets than a context allows by default
    ctx.set(zmq.MAX_SOCKETS, FAKES + 16)
    fakes = []
    try:
        for i in range(FAKES):
            fakes.append(make_socket(ctx, zmq.DEALER, identity=f"fake{i}"))
            fakes[-1].connect(b.cfg.endpoint("backend"))
            ready(fakes[-1], f"fake{i}", credits=1)
        assert wait_for(lambda: b.sample("vcascade_broker_workers") == FAKES, timeout_s=60)
        edge = b.edge("e1")
        for i in range(FAKES):
            send_roi(edge, f"r{i}")
        assert wait_for(lambda: b.sample("vcascade_broker_rois_dispatched_total") == FAKES, timeout_s=30)  # 1 each

        real = b.worker("real")
        ready(real, "real", credits=8)
        sent_s = time.monotonic()
        assert wait_for(lambda: b.sample("vcascade_broker_worker_credits", worker="real") == 8, heartbeat_s)
        registered_s = time.monotonic() - sent_s
        assert b.sample("vcascade_broker_workers_evicted_total") == 1  # its ROI, if still held, is re-queued

        answered: list[str] = []
        while len(answered) < FAKES and (got := recv(real, timeout_s=10)) is not None:
            answer(real, got[0])  # the fakes' ROIs once they pass their answer deadline
            answered.append(got[0].roi_id)
        assert sorted(answered) == sorted(f"r{i}" for i in range(FAKES))  # each once, all to the real worker
        answers = recv_n(edge, FAKES)
        assert all(isinstance(a, wire.Result) for a in answers) and len({a.roi_id for a in answers}) == FAKES
        assert b.sample("vcascade_broker_rois_redispatched_total") == FAKES  # each taken back once
        assert b.sample("vcascade_broker_rois_overdue_total") >= FAKES - 1  # all but the evicted one's, if any
        assert b.sample("vcascade_broker_drops_total", reason="worker_lost") == 0
        print(f"real worker registered {registered_s * 1000:.0f} ms after its Ready, beside {FAKES} fakes")
    finally:
        for sock in fakes:
            sock.close(linger=0)
        ctx.term()


def test_worker_names_from_peers_are_bounded_and_invalid_ones_refused(start_broker, monkeypatch):
    """Valid names beyond the label cap share `other`; a name that is not a config name never reaches the
    broker's books: the decoder refuses the Ready (`bad_fields`), so it never becomes a label value."""
    monkeypatch.setattr(broker_metrics, "MAX_WORKER_LABELS", 2)
    b = start_broker(worker_timeout_s=60)
    names = ["w1", "w2", "w3"]
    sockets = {name: b.worker(f"id-{i}") for i, name in enumerate(names)}
    for credits, name in enumerate(names, start=1):  # one at a time: the first two valid names get the two labels
        ready(sockets[name], name, credits)
        label = name if name in ("w1", "w2") else "other"
        assert wait_for(lambda: b.sample("vcascade_broker_worker_credits", worker=label) == credits)  # noqa: B023
        assert b.sample("vcascade_broker_worker_credits", worker=name) == (credits if label == name else 0.0)
    for i, bad in enumerate(["bad name\nnewline", "x" * 5000], start=1):
        ready(b.worker(f"id-bad-{i}"), bad, 7)
        assert wait_for(lambda: b.sample("vcascade_broker_malformed_messages_total", side="backend",  # noqa: B023
                                         reason="bad_fields") == i)  # noqa: B023
        assert b.sample("vcascade_broker_worker_credits", worker=bad) == 0.0
    assert b.sample("vcascade_broker_worker_credits", worker="other") == 3  # w3's, unchanged by the refused ones
    sockets["w1"].send(wire.encode(wire.Bye(sender="w1")))  # a label comes free when its worker leaves
    assert wait_for(lambda: b.sample("vcascade_broker_worker_credits", worker="w1") == 0.0)
    ready(sockets["w3"], "w3", credits=9)
    assert wait_for(lambda: b.sample("vcascade_broker_worker_credits", worker="w3") == 9)

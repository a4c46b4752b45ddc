"""BrokerLink over real ZeroMQ sockets: heartbeats, liveness, retries, failover, dedupe, the no-broker queue.

The broker side here is a ROUTER socket driven by the test, speaking the agreed protocol (heartbeats back to
every edge heard from, answers by roi_id), so that each rule can be exercised on its own, including answers a
real broker would never send twice. The full processes are in tests/e2e/test_edge_failover.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import zmq
from prometheus_client import REGISTRY

from tests.demo import demo_data
from tests.edge.sinks.test_sinks import strict_loads
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment, JsonlSinkConfig
from vcascade.edge.link.state import PendingRoi
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.sinks.registry import JsonlSink
from vcascade.edge.way_back import WayBack
from tests.edge.privacy.frames import crop_image

CROP = crop_image()
"""A crop as the redaction step makes it: the only kind the link takes."""

REPO = Path(__file__).resolve().parents[3]
INTERVAL_S = 0.1
LIVENESS = 3
EDGE = "edge-1"


class Peer:
    """A broker frontend played by the test: records ROIs, heartbeats every edge it heard from."""

    def __init__(self, ctx: zmq.Context, port: int, name: str) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(f"tcp://127.0.0.1:{port}")
        self.name, self.edges, self.rois, self.heartbeats = name, set(), [], 0
        self.beating, self._last_beat_s = True, 0.0

    def pump(self) -> None:
        while True:
            try:
                identity, *frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.edges.add(identity)
            header = wire.decode(frames[0])
            if isinstance(header, wire.Roi):
                self.rois.append((identity, header))
            elif isinstance(header, wire.Heartbeat):
                self.heartbeats += 1
        now_s = time.perf_counter()
        if self.beating and now_s - self._last_beat_s >= INTERVAL_S:
            self._last_beat_s = now_s
            for identity in self.edges:
                self.sock.send_multipart([identity, wire.encode(wire.Heartbeat(sender=self.name))])

    def answer(
        self, roi: wire.Roi, identity: bytes, drop: str | None = None, output: wire.EmbeddingOutput | None = None,
        hops: list[tuple[str, float]] | None = None,
    ) -> None:
        msg = wire.Drop(roi_id=roi.roi_id, reason=drop, where=self.name) if drop else wire.Result(
            roi_id=roi.roi_id, worker="w", output=output or wire.EmbeddingOutput(1, 1.0, False), hops=hops or []
        )
        self.sock.send_multipart([identity, wire.encode(msg)])


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _deployment(ports: list[int], free_port, liveness: int = LIVENESS, **edge_overrides) -> Deployment:
    data = demo_data()
    del data["cameras"]["street-2"]
    names = [f"b{i}" for i in range(len(ports))]
    data["brokers"] = {
        name: {"frontend_port": port, "backend_port": free_port(), "metrics_port": free_port()}
        for name, port in zip(names, ports)
    }
    data["workers"]["worker-1"]["brokers"] = names
    data["edges"][EDGE].update(brokers=names, sinks=[], **edge_overrides)
    data["heartbeat"] = {"interval_s": INTERVAL_S, "liveness": liveness}
    return Deployment.model_validate(data)


def _roi(n: int) -> PendingRoi:
    roi = wire.Roi(
        roi_id=f"{EDGE}-t-{n}", camera="street-1", frame_seq=n, stream_ts_ms=40.0 * n, capture_unix_ms=1.7e12,
        xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 34, 44), class_id=0, score=0.9,
    )
    now_s = time.perf_counter()
    return PendingRoi(roi, now_s, now_s, now_s, now_s)


def _until(condition, peers, timeout_s=20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        for peer in peers:
            peer.pump()
        time.sleep(0.01)


def _metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, {"edge": EDGE, **labels}) or 0.0


@pytest.fixture
def make_link(ctx, free_port, tmp_path):
    links = []

    def make(n_peers: int, bound: bool = True, liveness: int = LIVENESS, extra_sinks: tuple = (), **edge_overrides):
        ports = [free_port() for _ in range(n_peers)]
        peers = [Peer(ctx, port, f"b{i}") for i, port in enumerate(ports)] if bound else ports
        sink = JsonlSink(JsonlSinkConfig(type="jsonl", path=str(tmp_path / "out.jsonl")), ctx, EDGE, "jsonl[0]")
        settings = EdgeSettings.from_deployment(_deployment(ports, free_port, liveness, **edge_overrides), EDGE)
        link = BrokerLink(settings, ctx, WayBack(OutputLines([sink, *extra_sinks])))
        link.start()
        links.append((link, sink, peers))
        return link, peers

    yield make
    for link, sink, peers in links:
        if link.is_alive():
            link.drain(0.0)
        sink.close()
        for peer in peers:
            if isinstance(peer, Peer):
                peer.sock.close()


def _lines(tmp_path) -> list[dict]:
    path = tmp_path / "out.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_heartbeat_makes_a_broker_alive_and_silence_kills_it(make_link):
    link, (peer,) = make_link(1)
    _until(lambda: peer.heartbeats >= 1 and link.broker_states()["b0"]["up"], [peer])
    assert _metric("vcascade_edge_broker_up", broker="b0") == 1.0
    _until(lambda: peer.heartbeats >= 3, [peer])  # the edge keeps beating every interval
    peer.beating = False
    deadline = time.monotonic() + 20.0
    while link.broker_states()["b0"]["up"]:  # silent for liveness * interval -> dead
        assert time.monotonic() < deadline
        peer.pump()
        time.sleep(0.01)
    assert _metric("vcascade_edge_broker_up", broker="b0") == 0.0
    peer.beating = True
    _until(lambda: link.broker_states()["b0"]["up"], [peer])


def test_timeout_retries_through_the_other_broker_and_first_answer_wins(make_link, tmp_path):
    link, peers = make_link(2, roi_timeout_s=0.5, max_attempts=2)
    _until(lambda: all(s["up"] for s in link.broker_states().values()), peers)
    duplicates_before = _metric("vcascade_edge_duplicate_answers_total")
    link.submit(_roi(1), CROP)
    _until(lambda: sum(len(p.rois) for p in peers) == 2, peers)  # first send unanswered, then the retry
    first, second = sorted(peers, key=lambda p: p.rois[0][1].attempt)
    assert first is not second and first.rois[0][1].attempt == 0 and second.rois[0][1].attempt == 1
    second.answer(second.rois[0][1], second.rois[0][0])
    first.answer(first.rois[0][1], first.rois[0][0])  # late: already answered
    _until(lambda: _metric("vcascade_edge_duplicate_answers_total") > duplicates_before, peers)
    link.drain(10.0)
    lines = _lines(tmp_path)
    assert len(lines) == 1 and lines[0]["status"] == "ok" and lines[0]["attempt"] == 1
    tally = link.tally_copy()["street-1"]
    assert (tally.sent, tally.results, tally.dropped) == (1, 1, 0)


def test_drain_after_the_link_thread_has_stopped_returns_quietly(make_link, tmp_path):
    """``drain`` sets the stop flag and then wakes the thread; the thread may see the flag first and close its
    wake-up socket before the wake-up is sent (a race seen under load). Forced here: the thread stops first."""
    link, peers = make_link(1)
    link.submit(_roi(1), CROP)
    link._stopped.set()
    link.join(timeout=5.0)
    assert not link.is_alive()
    link.drain(1.0)  # wakes a closed socket: no error
    assert [line["reason"] for line in _lines(tmp_path)] == ["shutdown"]


def test_retries_are_bounded_then_dropped_as_timeout(make_link, tmp_path):
    link, peers = make_link(2, roi_timeout_s=0.3, max_attempts=2)
    _until(lambda: all(s["up"] for s in link.broker_states().values()), peers)
    link.submit(_roi(1), CROP)
    _until(lambda: link.tally_copy()["street-1"].drops.get("timeout") == 1, peers)
    assert sum(len(p.rois) for p in peers) == 2  # max_attempts sends, no more
    link.drain(5.0)
    assert [line["reason"] for line in _lines(tmp_path)] == ["timeout"]


def _spread_four_rois(link, peers):
    """Once both brokers are up, send 4 ROIs; returns (broker holding most, the other, ids it holds)."""
    _until(lambda: all(s["up"] for s in link.broker_states().values()), peers)
    for n in range(4):
        link.submit(_roi(n), CROP)
    _until(lambda: sum(len(p.rois) for p in peers) == 4, peers)
    victim, survivor = sorted(peers, key=lambda p: -len(p.rois))
    return victim, survivor, {roi.roi_id for _, roi in victim.rois}


def test_rois_of_a_dead_broker_are_retried_at_once_through_a_live_one(make_link, tmp_path):
    link, peers = make_link(2, roi_timeout_s=60.0)
    victim, survivor, on_victim = _spread_four_rois(link, peers)
    victim.beating = False  # it stops talking: declared dead after the liveness window, far before 60 s
    _until(lambda: {roi.roi_id for _, roi in survivor.rois} >= on_victim, [victim, survivor])
    assert not link.broker_states()[victim.name]["up"]
    for identity, roi in survivor.rois:
        survivor.answer(roi, identity)
    link.drain(10.0)
    lines = _lines(tmp_path)
    assert sorted(line["roi_id"] for line in lines) == sorted(f"{EDGE}-t-{n}" for n in range(4))
    assert all(line["status"] == "ok" for line in lines)


def test_a_closed_connection_retries_at_once_without_waiting_for_silence(make_link, tmp_path, caplog):
    link, peers = make_link(2, liveness=100, roi_timeout_s=600.0)  # silence alone would take 10 s to notice
    victim, survivor, on_victim = _spread_four_rois(link, peers)
    with caplog.at_level("WARNING", logger="vcascade.edge.link.broker_link"):
        victim.sock.close()  # its process is gone: the kernel closes the TCP connection
        _until(lambda: {roi.roi_id for _, roi in survivor.rois} >= on_victim, [survivor])
    assert f"broker {victim.name} lost (disconnected)" in caplog.text  # not by the 10-s silence
    assert not link.broker_states()[victim.name]["up"]
    for identity, roi in survivor.rois:
        survivor.answer(roi, identity)
    link.drain(10.0)
    assert sorted(line["status"] for line in _lines(tmp_path)) == ["ok"] * 4


def test_a_drop_answer_ends_the_roi_without_retry(make_link, tmp_path):
    link, (peer,) = make_link(1)
    _until(lambda: link.broker_states()["b0"]["up"], [peer])
    link.submit(_roi(1), CROP)
    _until(lambda: len(peer.rois) == 1, [peer])
    peer.answer(peer.rois[0][1], peer.rois[0][0], drop="stale")
    link.drain(10.0)
    outcomes = [(line["status"], line["reason"], line["where"]) for line in _lines(tmp_path)]
    assert outcomes == [("dropped", "stale", "b0")]


def test_without_any_live_broker_the_queue_drops_oldest_then_flows_when_one_comes(make_link, ctx, tmp_path):
    link, (port,) = make_link(1, bound=False, send_queue_max=3, overflow="block")  # nothing listens on port
    started = time.monotonic()
    for n in range(8):
        link.submit(_roi(n), CROP)  # never blocks, although overflow is "block"
    assert time.monotonic() - started < 10.0
    assert link.tally_copy()["street-1"].drops == {"no_broker": 5}
    late = Peer(ctx, port, "b0")  # the broker comes up: ZeroMQ reconnects, heartbeats revive it
    try:
        _until(lambda: len(late.rois) == 3, [late])
        for identity, roi in late.rois:
            late.answer(roi, identity)
        link.drain(10.0)
    finally:
        late.sock.close()
    lines = _lines(tmp_path)
    assert [line["roi_id"] for line in lines if line["status"] == "ok"] == [f"{EDGE}-t-{n}" for n in (5, 6, 7)]
    assert sum(line.get("reason") == "no_broker" for line in lines) == 5


def test_a_broker_sending_only_garbage_is_not_marked_alive(make_link):
    """Regression: any message, even an undecodable one, used to mark its broker alive, so a peer answering
    garbage on a broker's port was given ROIs that could only time out."""
    link, (peer,) = make_link(1)
    peer.beating = False
    _until(lambda: peer.edges, [peer])  # the edge's own heartbeats reached it: we know its identity
    before = _metric("vcascade_edge_malformed_messages_total", reason="not_msgpack")
    for _ in range(10):
        for identity in peer.edges:
            peer.sock.send_multipart([identity, b"\xc1 not msgpack"])
        time.sleep(INTERVAL_S)
    _until(lambda: _metric("vcascade_edge_malformed_messages_total", reason="not_msgpack") >= before + 10, [peer])
    assert not link.broker_states()["b0"]["up"]
    peer.beating = True  # a real heartbeat then makes it alive
    _until(lambda: link.broker_states()["b0"]["up"], [peer])


def test_counters_agree_with_lines_by_status_and_a_nan_similarity_is_written_as_null(make_link, ctx, tmp_path):
    """Issue 17, case 5: a worker's NaN similarity was written as ``NaN`` (not JSON), and the edge's totals
    disagreed with its lines. Every line here is strict JSON, and the books equal the lines of each status; a sink
    on a full disk loses every line, counted, without changing the books or the other sink."""
    full = JsonlSink(JsonlSinkConfig(type="jsonl", path="/dev/full"), ctx, EDGE, "jsonl[1]")
    link, (peer,) = make_link(1, extra_sinks=(full,))
    _until(lambda: link.broker_states()["b0"]["up"], [peer])
    for n in range(6):
        link.submit(_roi(n), CROP)
    _until(lambda: len(peer.rois) == 6, [peer])
    (id0, roi0), (id1, roi1), *others = peer.rois
    peer.answer(roi0, id0, output=wire.EmbeddingOutput(7, float("nan"), False))  # a NaN similarity
    peer.answer(roi1, id1, hops=[("head", float("inf"))])  # an infinite hop time
    for n, (identity, roi) in enumerate(others):
        peer.answer(roi, identity, drop="stale" if n < 2 else None)
    link.drain(10.0)
    full.close()
    lines = [strict_loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    tally = link.tally_copy()["street-1"]
    statuses = [line["status"] for line in lines]
    assert (tally.sent, tally.results, tally.drops) == (6, 4, {"stale": 2})
    assert statuses.count("ok") == tally.results and statuses.count("dropped") == sum(tally.drops.values())
    by_id = {line["roi_id"]: line for line in lines}
    assert by_id[f"{EDGE}-t-0"]["similarity"] is None and by_id[f"{EDGE}-t-0"]["identity_id"] == 7
    assert by_id[f"{EDGE}-t-1"]["latency_ms"]["head"] is None
    assert full.stats() == {"written": {}, "lost": {"disk_full": 6}}


def test_results_within_the_deadline_count_as_goodput_and_later_ones_as_late(make_link):
    link, (peer,) = make_link(1, roi={"ttl_ms": 5000.0, "deadline_ms": 300.0})
    _until(lambda: link.broker_states()["b0"]["up"], [peer])
    on_time0, late0 = _metric("vcascade_edge_results_on_time_total"), _metric("vcascade_edge_results_late_total")
    fresh, old = _roi(1), _roi(2)
    old.capture_s -= 1.0  # captured a second ago: its answer is past the 300 ms deadline whenever it comes
    link.submit(fresh, CROP)
    link.submit(old, CROP)
    _until(lambda: len(peer.rois) == 2, [peer])
    for identity, roi in peer.rois:
        peer.answer(roi, identity)
    _until(lambda: link.tally_copy()["street-1"].results == 2, [peer])
    assert _metric("vcascade_edge_results_on_time_total") == on_time0 + 1
    assert _metric("vcascade_edge_results_late_total") == late0 + 1

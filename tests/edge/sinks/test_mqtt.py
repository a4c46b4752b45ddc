"""The MQTT sink against a real Mosquitto broker (tests/mosquitto.py): delivery on per-camera, per-kind topics, a
refused login named clearly, and a broker killed and started again mid-run: every record is delivered once it is
back (within the queue's bound) or counted as dropped."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from tests.mosquitto import Mosquitto, Subscriber, make_tls_files
from tests.waiting import until
from vcascade.core.config import MqttSinkConfig
from vcascade.edge.sinks.mqtt import MqttSink, topic
from vcascade.edge.sinks.queue import QueuedSink

EDGE = "edge-mqtt"


def _sink(port: int, label: str, queue_max: int = 1000, drain_timeout_s: float = 10.0, **cfg) -> QueuedSink:
    config = MqttSinkConfig(type="mqtt", host="127.0.0.1", port=port, reconnect_min_s=0.1, reconnect_max_s=0.5, **cfg)
    return QueuedSink(MqttSink(config, None, EDGE, label), queue_max, drain_timeout_s)


def _result(n: int, camera: str = "cam-1") -> dict:
    return {"kind": "result", "roi_id": f"r-{n}", "camera": camera, "status": "ok", "n": n}


def test_topics_are_per_camera_and_kind():
    assert topic("site/vc", _result(1)) == "site/vc/cam-1/result"
    assert topic("vc", {"kind": "event", "camera": "gate", "event_id": "e1"}) == "vc/gate/event"
    assert topic("vc", {"status": "ok", "camera": "gate"}) == "vc/gate/result"
    assert topic("vc", {"kind": "event"}) == "vc/_/event"


def test_records_are_delivered_on_their_topics_and_counted_at_puback(tmp_path, free_port):
    port = free_port()
    broker = Mosquitto(tmp_path / "mq", port).start()
    sub = Subscriber(port, "site/vc/#")
    sink = _sink(port, "mqtt[0]", topic_prefix="site/vc")
    try:
        assert sub.subscribed.wait(20), "the subscriber never subscribed"
        records = [
            _result(1),
            {"kind": "event", "event_id": "e-1", "camera": "cam-2", "type": "line_crossed", "score": float("nan")},
            {"kind": "camera_state", "camera": "cam-1", "state": "stalled", "reason": "read_timeout", "detail": "",
             "wall_ts_ms": 1.0},
        ]
        for record in records:
            sink.write(record)
        assert sub.wait_for(lambda got: len(got) >= 3), sub.messages
        sink.close()
    finally:
        sub.close()
        broker.stop()
    assert [t for t, _ in sub.messages] == ["site/vc/cam-1/result", "site/vc/cam-2/event", "site/vc/cam-1/camera_state"]
    assert sub.messages[0][1] == records[0]
    assert sub.messages[1][1]["score"] is None  # strict JSON: NaN is null
    assert sink.stats() == {
        "written": {"ok": 1, "event": 1, "camera_state": 1}, "lost": {}, "queued": 0, "error": ""
    }


def test_a_refused_login_is_named_and_the_records_are_counted(tmp_path, free_port):
    port = free_port()
    broker = Mosquitto(tmp_path / "mq", port, users={"edge": "right"}).start()
    wrong = _sink(port, "mqtt[0]", drain_timeout_s=0.5, username="edge", password="wrong")
    right = _sink(port, "mqtt[1]", username="edge", password="right")
    try:
        for n in range(3):
            wrong.write(_result(n))
            right.write(_result(n))
        assert until(lambda: "not_authorized" in wrong.stats()["error"]), wrong.stats()
        assert until(lambda: right.stats()["written"].get("ok") == 3), right.stats()
        wrong.close()
        right.close()
    finally:
        broker.stop()
    error = wrong.stats()["error"]
    assert "refused the login of user 'edge'" in error and "not authorized" in error.lower(), error
    assert wrong.stats()["written"] == {} and wrong.stats()["lost"] == {"shutdown": 3}
    assert REGISTRY.get_sample_value(
        "vcascade_edge_sink_attempts_failed_total", {"edge": EDGE, "sink": "mqtt[0]", "reason": "not_authorized"}
    ) >= 1


def test_tls_with_the_brokers_ca_delivers_and_an_unknown_ca_is_refused(tmp_path, free_port):
    port = free_port()
    tls = make_tls_files(tmp_path / "tls")
    broker = Mosquitto(tmp_path / "mq", port, users={"edge": "right"}, tls=tls).start()
    sub = Subscriber(port, "vcascade/#", username="edge", password="right", ca_file=tls.ca)
    trusted = _sink(port, "mqtt[0]", tls=True, ca_file=str(tls.ca), username="edge", password="right")
    unknown = _sink(port, "mqtt[1]", drain_timeout_s=0.5, tls=True, username="edge", password="right")  # system CAs
    try:
        assert sub.subscribed.wait(20), "the subscriber never subscribed over TLS"
        trusted.write(_result(1))
        unknown.write(_result(2))
        assert sub.wait_for(lambda got: len(got) >= 1)
        assert until(lambda: unknown.stats()["error"].startswith("connection")), unknown.stats()
        trusted.close()
        unknown.close()
    finally:
        sub.close()
        broker.stop()
    assert [m["n"] for _, m in sub.messages] == [1], "only the sink that trusts the broker's CA got through"
    assert trusted.stats()["written"] == {"ok": 1}
    assert unknown.stats()["written"] == {} and unknown.stats()["lost"] == {"shutdown": 1}


def test_a_broker_killed_mid_run_gets_every_record_back_within_the_bound_or_counted(tmp_path, free_port):
    """Mosquitto keeps the subscriber's session in its database (saved on every change), as a production broker
    does, so what it accepted after the restart reaches the subscriber whichever reconnects first."""
    port = free_port()
    broker = Mosquitto(tmp_path / "mq", port, persistent=True).start()
    sub = Subscriber(port, "vc/#", client_id="test-subscriber")
    queue_max, in_flight = 20, 5
    sink = _sink(port, "mqtt[0]", queue_max=queue_max, drain_timeout_s=30.0, max_in_flight=in_flight, topic_prefix="vc")
    try:
        assert sub.subscribed.wait(20), "the subscriber never subscribed"
        for n in range(10):
            sink.write(_result(n))
        assert until(lambda: sink.stats()["written"].get("ok") == 10), sink.stats()
        assert sub.wait_for(lambda got: len(got) >= 10)  # a broker killed holds what it acked and did not forward
        broker.kill()
        assert until(lambda: not sink.backend.connected.is_set()), "the sink never saw the broker go"
        started_s = time.perf_counter()
        for n in range(10, 70):
            sink.write(_result(n))
        write_s = time.perf_counter() - started_s
        held = sink.stats()
        broker.start()
        assert until(lambda: sink.stats()["queued"] == 0), sink.stats()
        stats = sink.stats()
        delivered = stats["written"]["ok"]
        assert sub.wait_for(lambda got: len({m["n"] for _, m in got}) >= delivered), (delivered, [m["n"] for _, m in sub.messages], stats)
        sink.close()
    finally:
        sub.close()
        broker.stop()
    assert write_s < 0.5, f"writing 60 records to a sink whose broker is down took {write_s:.2f} s"
    assert held["queued"] <= queue_max + in_flight + 1, held  # the queue, the unacknowledged, the one in hand
    assert set(stats["lost"]) == {"queue_full"} and stats["lost"]["queue_full"] >= 60 - queue_max - in_flight - 1
    assert delivered + stats["lost"]["queue_full"] == 70, stats  # emitted = delivered + dropped
    received = [m["n"] for _, m in sub.messages]
    distinct = list(dict.fromkeys(received))  # duplicates (a re-sent message) removed by id, first arrival kept
    assert len(distinct) == delivered
    assert distinct == sorted(distinct), "records arrive in the order they were written"
    assert distinct[-queue_max:] == list(range(70 - queue_max, 70)), "the newest records within the bound all arrive"
    assert held["error"].startswith("disconnected: lost MQTT broker"), held  # named while it was away

"""The ZeroMQ PUB results sink (issue 28, item 5): under CurveZMQ only authorized subscribers receive results
(a plaintext subscriber and one with an unknown key get nothing, the refusals counted); without CurveZMQ,
``check`` refuses a non-loopback endpoint like every other socket."""

from __future__ import annotations

import time

import pytest
import yaml
import zmq
import zmq.auth
from prometheus_client import REGISTRY

from tests.demo import demo_data
from tests.waiting import until
from vcascade.core.config import ConfigError, SecurityConfig, ZmqPubSinkConfig, load_config
from vcascade.core.transport.keys import generate_keys
from vcascade.edge.sinks.registry import open_sinks

EDGE = "edge-pub"
pytestmark = pytest.mark.timeout(120)


def _check(tmp_path, endpoint: str, **security) -> str:
    data = demo_data()
    data["edges"]["edge-1"]["sinks"] = [{"type": "zmq_pub", "endpoint": endpoint}]
    data["security"] = security
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_config(path)
    except ConfigError as exc:
        return str(exc)
    return ""


def test_check_refuses_a_non_loopback_pub_endpoint_without_curvezmq(tmp_path):
    for endpoint in ("tcp://*:5570", "tcp://0.0.0.0:5570", "tcp://10.1.2.3:5570", "tcp://eth0:5570"):
        assert "edges.edge-1.sinks[0].endpoint" in _check(tmp_path, endpoint), endpoint
    assert _check(tmp_path, "tcp://127.0.0.1:5570") == ""
    assert _check(tmp_path, "ipc:///tmp/results") == ""
    assert _check(tmp_path, "tcp://*:5570", allow_plaintext_remote=True) == ""


def _subscriber(ctx, endpoint: str, keys_dir=None, name: str | None = None) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    if name is not None:
        public, secret = zmq.auth.load_certificate(keys_dir / f"{name}.key_secret")
        sub.curve_publickey, sub.curve_secretkey = public, secret
        sub.curve_serverkey = zmq.auth.load_certificate(keys_dir / f"{EDGE}.key")[0]
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    return sub


def test_under_curvezmq_only_authorized_subscribers_receive_results(tmp_path, free_port):
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    generate_keys(keys, [EDGE, "viewer", "stranger"])
    authorized.mkdir()
    (authorized / "viewer.key").write_bytes((keys / "viewer.key").read_bytes())
    security = SecurityConfig.model_validate(
        {"curve": {"enabled": True, "keys_dir": str(keys), "authorized_dir": str(authorized)}}
    )
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    (pub,) = open_sinks([ZmqPubSinkConfig(type="zmq_pub", endpoint=endpoint)], ctx, EDGE, security)
    viewer = _subscriber(ctx, endpoint, keys, "viewer")
    plain = _subscriber(ctx, endpoint)
    stranger = _subscriber(ctx, endpoint, keys, "stranger")
    refused = lambda: REGISTRY.get_sample_value(  # noqa: E731
        "vcascade_edge_auth_failures_total", {"edge": EDGE, "reason": "unauthorized"}) or 0.0
    try:
        deadline = time.monotonic() + 30.0
        while not viewer.poll(50):  # PUB drops until the subscription has arrived
            assert time.monotonic() < deadline, "the authorized subscriber got nothing"
            pub.write({"kind": "result", "camera": "cam-1", "status": "ok"})
        topic, _ = viewer.recv_multipart()
        assert topic == b"cam-1"
        for _ in range(20):
            pub.write({"kind": "result", "camera": "cam-1", "status": "ok"})
        assert until(lambda: refused() >= 1, 20.0), "the stranger's handshake was not counted"
        assert not plain.poll(200) and not stranger.poll(200)
    finally:
        for sock in (viewer, plain, stranger):
            sock.close()
        pub.close()
        ctx.term()

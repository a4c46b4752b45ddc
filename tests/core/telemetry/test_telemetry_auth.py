"""vcascade_worker_auth_failures_total moves when a worker's CurveZMQ handshake is refused (real ZAP
authenticator, real keys): the worker-side twin of tests/core/transport/test_security.py's edge and broker cases."""

from __future__ import annotations

import shutil
import time

import zmq
from prometheus_client import REGISTRY

from vcascade.core.transport.keys import generate_keys
from vcascade.core.schema import CurveConfig, SecurityConfig
from vcascade.core.transport.security import secure_client, secure_server, watch_auth_failures
from vcascade.core.transport.sockets import make_socket
from vcascade.core.transport.zap import WORKERS, start_authenticator


def test_a_refused_worker_counts_its_auth_failures(tmp_path, free_port):
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    generate_keys(keys, ["broker-s", "worker-ok", "worker-rogue"])
    authorized.mkdir()
    shutil.copy(keys / "worker-ok.key", authorized / "worker-ok.key")  # worker-rogue is not authorized
    security = SecurityConfig(curve=CurveConfig(enabled=True, keys_dir=str(keys), authorized_dir=str(authorized)))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    auth = start_authenticator(ctx, security)
    server = make_socket(ctx, zmq.ROUTER)
    secure_server(server, security, "broker-s")
    auth.admit(server, WORKERS, ["worker-ok"])  # the backend's role
    server.bind(endpoint)
    worker = make_socket(ctx, zmq.DEALER, identity="worker-rogue")
    secure_client(worker, security, "worker-rogue", "broker-s")
    monitor = watch_auth_failures(worker, "worker", "worker-rogue")
    labels = {"worker": "worker-rogue", "reason": "unauthorized"}
    before = REGISTRY.get_sample_value("vcascade_worker_auth_failures_total", labels) or 0.0
    try:
        worker.connect(endpoint)
        worker.send(b"ready?")
        deadline = time.monotonic() + 30
        while monitor.total < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert REGISTRY.get_sample_value("vcascade_worker_auth_failures_total", labels) >= before + 1
        assert not server.poll(200), "a refused worker got a message through"
    finally:
        monitor.stop()
        for sock in (worker, server):
            sock.close(linger=0)
        if auth is not None:
            auth.stop()
        ctx.term()

"""CurveZMQ: key files from the real CLI, load errors, and a real ROUTER/DEALER pair over tcp with curve."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
import zmq
from prometheus_client import REGISTRY

from tests.demo import demo_data
from vcascade.core.config import ConfigError, CurveConfig, Deployment, SecurityConfig, load_config
from vcascade.core.transport.keys import generate_keys
from vcascade.core.transport.security import (
    CURVE_OVERHEAD_BYTES,
    SecurityError,
    check_keys,
    load_keypair,
    load_public_key,
    secure_client,
    secure_server,
    watch_auth_failures,
)
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES, make_socket
from vcascade.core.transport.zap import EDGES, OPERATORS, WORKERS, RoleAuthenticator, admitted_names, start_authenticator

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs" / "demo.yaml"
VCASCADE = Path(sys.executable).parent / "vcascade"
WAIT_S = 20.0  # generous: the CI machine is slow and shared
SILENCE_S = 1.5  # how long a refused client's message must stay undelivered after the refusal was counted


def _vcascade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VCASCADE), *args], capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- key files


def test_keys_generate_cli_writes_private_secrets_and_refuses_to_overwrite(tmp_path):
    keys = tmp_path / "keys"
    done = _vcascade("keys", "generate", str(keys), "--config", str(DEMO), "--name", "spare")
    assert done.returncode == 0, done.stderr
    names = ["broker-1", "edge-1", "worker-1", "worker-2", "spare"]
    assert sorted(p.name for p in keys.iterdir()) == sorted(f"{n}.key{s}" for n in names for s in ("", "_secret"))
    for name in names:
        secret = keys / f"{name}.key_secret"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        pair = load_keypair(keys, name)
        assert load_public_key(keys, name) == pair.public
        assert zmq.curve_public(pair.secret) == pair.public  # the secret really belongs to the public key
    before = (keys / "edge-1.key_secret").read_bytes()

    again = _vcascade("keys", "generate", str(keys), "--name", "edge-1")
    assert again.returncode == 2
    assert "edge-1.key_secret" in again.stderr and "--force" in again.stderr
    assert (keys / "edge-1.key_secret").read_bytes() == before

    forced = _vcascade("keys", "generate", str(keys), "--name", "edge-1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (keys / "edge-1.key_secret").read_bytes() != before
    assert stat.S_IMODE((keys / "edge-1.key_secret").stat().st_mode) == 0o600


def test_keys_generate_cli_needs_names(tmp_path):
    done = _vcascade("keys", "generate", str(tmp_path / "k"))
    assert done.returncode == 2 and "--name" in done.stderr
    bad = _vcascade("keys", "generate", str(tmp_path / "k"), "--name", "../escape")
    assert bad.returncode == 2 and "escape" in bad.stderr
    assert not (tmp_path / "escape.key_secret").exists()


def test_load_errors_name_the_file(tmp_path):
    generate_keys(tmp_path, ["good"])
    with pytest.raises(SecurityError, match=r"missing\.key_secret: cannot read"):
        load_keypair(tmp_path, "missing")
    (tmp_path / "folder.key_secret").mkdir()
    with pytest.raises(SecurityError, match=r"folder\.key_secret: cannot read"):
        load_keypair(tmp_path, "folder")
    (tmp_path / "garbage.key").write_bytes(b"\x00\xff not a certificate\n")
    with pytest.raises(SecurityError, match=r"garbage\.key: not a ZeroMQ certificate"):
        load_public_key(tmp_path, "garbage")
    (tmp_path / "short.key").write_text('curve\n    public-key = "abc"\n')
    with pytest.raises(SecurityError, match=r"short\.key: malformed public-key"):
        load_public_key(tmp_path, "short")
    generate_keys(tmp_path, ["other"])
    other_public = load_public_key(tmp_path, "other").decode()
    good_public = load_public_key(tmp_path, "good").decode()
    mixed = (tmp_path / "good.key_secret").read_text().replace(good_public, other_public)
    (tmp_path / "mixed.key_secret").write_text(mixed)
    with pytest.raises(SecurityError, match=r"mixed\.key_secret: public-key does not belong to secret-key"):
        load_keypair(tmp_path, "mixed")
    shutil.copy(tmp_path / "good.key", tmp_path / "public-only.key_secret")
    with pytest.raises(SecurityError, match=r"public-only\.key_secret: no secret-key"):
        load_keypair(tmp_path, "public-only")


def _demo_raw() -> dict:
    return demo_data()


def test_check_keys_per_component(tmp_path):
    raw = _demo_raw()
    raw["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    dep = Deployment.model_validate(raw)
    with pytest.raises(SecurityError, match="broker-1.key_secret"):
        check_keys(dep, "broker-1")
    generate_keys(tmp_path / "keys", ["broker-1", "edge-1"])
    assert check_keys(dep, "broker-1")[0].name == "broker-1.key_secret"
    assert [p.name for p in check_keys(dep, "edge-1")] == ["edge-1.key_secret", "broker-1.key"]
    with pytest.raises(SecurityError, match="worker-1.key_secret"):
        check_keys(dep, "worker-1")
    assert check_keys(Deployment.model_validate(_demo_raw()), "worker-1") == []  # curve disabled: nothing needed


def test_plaintext_broker_on_a_remote_address_is_a_config_error(tmp_path):
    raw = _demo_raw()
    raw["brokers"]["broker-1"]["bind"] = "*"
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"brokers\.broker-1\.bind = '\*': expected a loopback address"):
        load_config(path)
    for security in ({"curve": {"enabled": True}}, {"allow_plaintext_remote": True}):
        path.write_text(yaml.safe_dump({**raw, "security": security}))
        assert load_config(path).brokers["broker-1"].bind == "*"


def test_disabled_security_changes_nothing():
    ctx = zmq.Context()
    sock = make_socket(ctx, zmq.ROUTER)
    try:
        secure_server(sock, SecurityConfig(), "broker-1")
        secure_client(sock, SecurityConfig(), "edge-1", "broker-1")
        assert sock.curve_server == 0 and sock.mechanism == zmq.NULL
        assert start_authenticator(ctx, SecurityConfig()) is None
    finally:
        sock.close(linger=0)
        ctx.term()


# ---------------------------------------------------------------- a real pair over tcp


@pytest.fixture
def curve_world(tmp_path):
    """Keys for a server and three clients; only ``edge-ok`` is authorized."""
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    generate_keys(keys, ["broker-s", "edge-ok", "edge-rogue", "broker-other"])
    authorized.mkdir()
    shutil.copy(keys / "edge-ok.key", authorized / "edge-ok.key")
    return SecurityConfig(curve=CurveConfig(enabled=True, keys_dir=str(keys), authorized_dir=str(authorized)))


class _Server:
    """A CURVE ROUTER of "broker-s" admitting the keys of ``admits`` under ``role``; ``shared``: the context and
    ZAP handler of another _Server (one handler per context), else its own."""

    def __init__(
        self, security: SecurityConfig, endpoint: str, name: str, role: str = EDGES, admits: tuple = ("edge-ok",),
        shared: _Server | None = None,
    ) -> None:
        self.owner = shared is None
        self.ctx = zmq.Context() if shared is None else shared.ctx
        self.auth: RoleAuthenticator = start_authenticator(self.ctx, security) if shared is None else shared.auth
        self.sock = make_socket(self.ctx, zmq.ROUTER)
        secure_server(self.sock, security, "broker-s")
        gate = self.auth.admit(self.sock, role, admits)
        self.monitor = watch_auth_failures(self.sock, "broker", name, gate.refusal_reason)
        self.sock.bind(endpoint)
        self.clients: list[zmq.Socket] = []

    def client(
        self, security: SecurityConfig, name: str, server_name: str, endpoint: str, identity: str | None = None
    ) -> zmq.Socket:
        sock = make_socket(self.ctx, zmq.DEALER, identity=identity or name)
        secure_client(sock, security, name, server_name)
        sock.connect(endpoint)
        self.clients.append(sock)
        return sock

    def plain_client(self, endpoint: str) -> zmq.Socket:
        """A DEALER without CurveZMQ, connected to ``endpoint``."""
        sock = make_socket(self.ctx, zmq.DEALER, identity="edge-plain")
        sock.connect(endpoint)
        self.clients.append(sock)
        return sock

    def recv(self, timeout_s: float) -> list[bytes] | None:
        return self.sock.recv_multipart() if self.sock.poll(int(timeout_s * 1000)) else None

    def close(self) -> None:
        for sock in self.clients:
            sock.close(linger=0)
        self.sock.close(linger=0)
        self.monitor.stop()
        if self.owner:
            self.auth.stop()
            self.ctx.term()


def _wait_for(predicate, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _metric(name: str, reason: str) -> float:
    return REGISTRY.get_sample_value("vcascade_broker_auth_failures_total", {"broker": name, "reason": reason}) or 0.0


def _assert_served(server: _Server, client: zmq.Socket, payload: bytes) -> None:
    client.send_multipart([b"hello", payload])
    got = server.recv(WAIT_S)
    assert got is not None and got[1:] == [b"hello", payload]
    server.sock.send_multipart([got[0], b"back"])
    assert client.poll(int(WAIT_S * 1000)) and client.recv() == b"back"


def _assert_refused(server: _Server, connect: Callable[[], zmq.Socket], reason: str, name: str) -> None:
    """Connect a client with ``connect`` and check its refusal is counted under ``reason`` and its message never
    delivered. The count is read before the connection: a client without CurveZMQ, or one the ZAP handler
    refused, does not retry (libzmq ends the session), so its one refusal may be counted before ``connect``
    returns."""
    before = server.monitor.counts[reason]
    client = connect()
    try:  # never blocking: once the refusal has ended the session (first, on a loaded machine), no pipe is left
        client.send_multipart([b"let me in", b"x" * 1000], flags=zmq.NOBLOCK)
    except zmq.Again:
        pass  # nothing queued, so nothing can get through either; the refusal must still be counted below
    assert _wait_for(lambda: server.monitor.counts[reason] > before), f"no {reason} refusal counted"
    assert server.recv(SILENCE_S) is None, "a refused client got a message through"
    assert _metric(name, reason) >= server.monitor.counts[reason] > 0
    client.close(linger=0)


def test_curve_admits_the_authorized_client_and_refuses_the_others(curve_world, free_port):
    endpoint, name = f"tcp://127.0.0.1:{free_port()}", "curve-pair"
    server = _Server(curve_world, endpoint, name)
    try:
        good = server.client(curve_world, "edge-ok", "broker-s", endpoint)
        _assert_served(server, good, b"first")

        rogue = functools.partial(server.client, curve_world, "edge-rogue", "broker-s", endpoint)  # not authorized
        _assert_refused(server, rogue, "unauthorized", name)

        impostor = functools.partial(server.client, curve_world, "edge-ok", "broker-other", endpoint)  # wrong key
        _assert_refused(server, impostor, "protocol", name)

        _assert_refused(server, functools.partial(server.plain_client, endpoint), "protocol", name)  # no CURVE

        _assert_served(server, good, b"still served")
        assert server.monitor.counts["unauthorized"] >= 1 and server.monitor.counts["protocol"] >= 2
    finally:
        server.close()


@pytest.fixture
def roles_world(tmp_path):
    """Keys for a server, an edge, a worker and a stranger; the edge's and the worker's keys are authorized."""
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    generate_keys(keys, ["broker-s", "edge-ok", "worker-ok", "edge-rogue"])
    authorized.mkdir()
    for name in ("edge-ok", "worker-ok"):
        shutil.copy(keys / f"{name}.key", authorized / f"{name}.key")
    return SecurityConfig(curve=CurveConfig(enabled=True, keys_dir=str(keys), authorized_dir=str(authorized)))


def test_each_socket_admits_only_the_keys_of_its_role(roles_world, free_port):
    """Issue 17, case 6: one ZAP handler, an edges socket and a workers socket, every key authorized; an edge's
    key on the workers' socket and a worker's key on the edges' socket are refused as ``wrong_role``."""
    front_end, back_end = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    front = _Server(roles_world, front_end, "roles-front", EDGES, ("edge-ok",))
    back = _Server(roles_world, back_end, "roles-back", WORKERS, ("worker-ok",), shared=front)
    try:
        _assert_served(front, front.client(roles_world, "edge-ok", "broker-s", front_end), b"edge on edges")
        _assert_served(back, back.client(roles_world, "worker-ok", "broker-s", back_end), b"worker on workers")

        edge_as_worker = functools.partial(back.client, roles_world, "edge-ok", "broker-s", back_end)
        _assert_refused(back, edge_as_worker, "wrong_role", "roles-back")
        worker_as_edge = functools.partial(front.client, roles_world, "worker-ok", "broker-s", front_end)
        _assert_refused(front, worker_as_edge, "wrong_role", "roles-front")
        stranger = functools.partial(back.client, roles_world, "edge-rogue", "broker-s", back_end)  # in no role
        _assert_refused(back, stranger, "unauthorized", "roles-back")

        _assert_served(front, front.client(roles_world, "edge-ok", "broker-s", front_end, "edge-ok-2"), b"again")
        _assert_served(back, back.client(roles_world, "worker-ok", "broker-s", back_end, "worker-ok-2"), b"again")
        assert front.monitor.counts["unauthorized"] == 0  # the worker's key was told apart from a stranger's
        extra = make_socket(front.ctx, zmq.ROUTER)
        try:
            with pytest.raises(ValueError, match="already admitted"):  # one socket per role and context
                front.auth.admit(extra, EDGES, ["edge-ok"])
        finally:
            extra.close(linger=0)
    finally:
        back.close()
        front.close()


def test_roles_come_from_the_deployment_file():
    raw = _demo_raw()
    raw["workers"]["worker-2"] = {**raw["workers"]["worker-1"], "metrics_port": 9999}
    raw["workers"]["worker-1"].update(devices=["cpu"], downstream="stages-b")
    raw["stage_groups"] = {"stages-b": {"port": 5599, "metrics_port": 9998, "devices": ["cpu"]}}
    dep = Deployment.model_validate(raw)
    assert admitted_names(dep, "broker-1") == {EDGES: ["edge-1"], WORKERS: ["worker-1", "worker-2"]}
    assert admitted_names(dep, "stages-b") == {WORKERS: ["worker-1"]}  # only the worker that sends it stages
    assert admitted_names(dep, "edge-1") == {OPERATORS: ["edge-1"]}
    assert admitted_names(dep, "worker-1") == {}
    with pytest.raises(KeyError, match="nobody"):
        admitted_names(dep, "nobody")


def test_a_refused_client_counts_its_own_failures(curve_world, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    server = _Server(curve_world, endpoint, "curve-client-side")
    try:
        rogue = make_socket(server.ctx, zmq.DEALER, identity="edge-rogue")
        secure_client(rogue, curve_world, "edge-rogue", "broker-s")
        monitor = watch_auth_failures(rogue, "edge", "edge-rogue")
        rogue.connect(endpoint)
        server.clients.append(rogue)
        rogue.send(b"let me in")
        assert _wait_for(lambda: monitor.counts["unauthorized"] >= 1), dict(monitor.counts)
        labels = {"edge": "edge-rogue", "reason": "unauthorized"}
        assert REGISTRY.get_sample_value("vcascade_edge_auth_failures_total", labels) >= 1
    finally:
        server.close()


def test_oversized_message_over_curve_is_refused_and_the_next_client_served(curve_world, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    server = _Server(curve_world, endpoint, "curve-size")
    try:
        largest = MAX_MESSAGE_BYTES - CURVE_OVERHEAD_BYTES  # MAXMSGSIZE applies to the encrypted frame
        big = server.client(curve_world, "edge-ok", "broker-s", endpoint)
        big.send(bytes(largest + 1))
        assert server.recv(SILENCE_S + 3) is None, "an oversized message was delivered"
        big.close(linger=0)
        # another routing id: ROUTER ignores a second peer with an id still held by a connection it knows
        good = server.client(curve_world, "edge-ok", "broker-s", endpoint, identity="edge-ok-2")
        good.send(bytes(largest))
        got = server.recv(WAIT_S)
        assert got is not None and len(got[1]) == largest
        _assert_served(server, good, b"small")
    finally:
        server.close()


def test_authenticator_refuses_a_missing_authorized_folder(tmp_path):
    generate_keys(tmp_path, ["broker-s"])
    missing = CurveConfig(enabled=True, keys_dir=str(tmp_path), authorized_dir=str(tmp_path / "no"))
    security = SecurityConfig(curve=missing)
    ctx = zmq.Context()
    try:
        with pytest.raises(SecurityError, match=r"no: authorized keys folder does not exist"):
            start_authenticator(ctx, security)
        empty = tmp_path / "empty"
        empty.mkdir()
        security = SecurityConfig(curve=CurveConfig(enabled=True, keys_dir=str(tmp_path), authorized_dir=str(empty)))
        with pytest.raises(SecurityError, match=r"empty: no \*\.key public key"):
            start_authenticator(ctx, security)
    finally:
        ctx.term()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_secret_names_the_file(tmp_path):
    generate_keys(tmp_path, ["locked"])
    os.chmod(tmp_path / "locked.key_secret", 0)
    with pytest.raises(SecurityError, match=r"locked\.key_secret: cannot read"):
        load_keypair(tmp_path, "locked")


def test_keys_check_cli_reports_the_missing_file(tmp_path):
    raw = _demo_raw()
    raw["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(raw))
    missing = _vcascade("keys", "check", "--config", str(config), "--name", "edge-1")
    assert missing.returncode == 1 and "edge-1.key_secret: cannot read" in missing.stderr
    assert _vcascade("keys", "generate", str(tmp_path / "keys"), "--config", str(config)).returncode == 0
    done = _vcascade("keys", "check", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["broker-1", "edge-1", "worker-1"]


def test_keys_check_cli_verifies_each_brokers_roles(tmp_path):
    raw = _demo_raw()
    keys = tmp_path / "keys"
    raw["security"] = {"curve": {"enabled": True, "keys_dir": str(keys)}}
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert _vcascade("keys", "generate", str(keys), "--config", str(config)).returncode == 0
    done = _vcascade("keys", "check", "--config", str(config), "--name", "broker-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("; edges socket admits edge-1; workers socket admits worker-1")
    (keys / "worker-1.key").unlink()  # the broker would refuse its own worker
    missing = _vcascade("keys", "check", "--config", str(config), "--name", "broker-1")
    assert missing.returncode == 1
    assert "worker-1.key: missing; broker-1 would refuse worker-1 on its workers socket" in missing.stderr

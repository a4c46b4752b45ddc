"""The identity store as the container deployments ship it (compose.yaml, deploy/k8s/base/redis.yaml) keeps the
identity id counter through a crash of Redis (kill -9), on a real redis-server; without its volume, a Redis
starts empty and hands out ids from 1 again (docs/DEPLOY.md, "Identity store in containers")."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import yaml

from tests.redis_server import RedisServer
from tests.waiting import until
from vcascade.center.identity.redis_store import RedisStore

REPO = Path(__file__).resolve().parents[2]
BLOCK = 32
"""Ids reserved at a time (``identity.id_block``'s default)."""


def _compose_args() -> list[str]:
    return yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["redis"]["command"]


def _k8s_args() -> list[str]:
    (deployment,) = [o for o in yaml.safe_load_all((REPO / "deploy/k8s/base/redis.yaml").read_text()) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["args"]


def _shipped_server(args: list[str], port: int, folder: Path) -> RedisServer:
    """A redis-server with the shipped options, its ``--dir`` (the volume) replaced by ``folder``."""
    assert args[0] == "redis-server"
    options = dict(zip(args[1::2], args[2::2]))
    del options["--dir"]
    return RedisServer(port, folder, [word for option in options.items() for word in option])


def _reserve(server: RedisServer) -> list[int]:
    """One id block from a fresh store client, once the server has written it to its append-only file."""
    store = RedisStore(server.url, "mobilenetv2-embedder")
    try:
        ids = store.reserve_ids(BLOCK)
    finally:
        store.close()
    client = redis.Redis.from_url(server.url)
    try:
        assert until(lambda: client.info("persistence").get("aof_buffer_length", 0) == 0, timeout_s=10)
    finally:
        client.close()
    return ids


@pytest.mark.parametrize("args", [_compose_args, _k8s_args], ids=["compose", "k8s"])
def test_the_shipped_redis_keeps_the_id_counter_through_a_crash(args, free_port, tmp_path):
    server = _shipped_server(args(), free_port(), tmp_path / "data").start()
    try:
        assert _reserve(server) == list(range(1, BLOCK + 1))
        server.kill()
        server.start()  # the same folder: the volume outlives the container
        assert _reserve(server) == list(range(BLOCK + 1, 2 * BLOCK + 1))  # never an id handed out before
        server.kill()
        server.folder = tmp_path / "no-volume"  # the container's own layer, gone with it
        server.start()
        assert _reserve(server)[0] == 1  # what the volume and the append-only file prevent
    finally:
        server.stop()

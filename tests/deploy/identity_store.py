"""What the container deployments must hold for identities (issue 16, docs/IDENTITY.md), for the compose and
Kubernetes checks: their workers run in separate containers or pods, so the embedded SQLite default would give
each one its own identity space; every embedding recognizer must keep its space in the shared Redis, and that
Redis must persist (a Redis restarted empty, or one that evicted the id counter, would hand out ids from 1
again)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from vcascade.core.config import Deployment

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT_FILES = sorted((REPO / "deploy").rglob("vcascade.yaml"))
"""The deployment files the containers and pods load (compose, Kubernetes base and overlays): all multi-host."""
REDIS_DEFAULT_PORT = 6379


def redis_stores(dep: Deployment) -> dict[str, tuple[str, int]]:
    """(host, port) of the Redis identity store of each embedding recognizer of ``dep``, by recognizer name.

    Raises:
        AssertionError: an embedding recognizer whose store is not Redis (message names its key path).
    """
    stores = {}
    for name, rec in dep.recognizers.items():
        if rec.head.type != "embedding":
            continue
        store = rec.head.identity.store
        assert store.type == "redis", (
            f"recognizers.{name}.head.identity.store.type = {store.type!r}: one identity space per container; "
            "expected the shared redis store"
        )
        url = urlsplit(store.url)
        stores[name] = (url.hostname, url.port or REDIS_DEFAULT_PORT)
    return stores


def assert_persistent_redis(args: list[str], data_dir: str, port: int) -> None:
    """``args`` (a container's command line) run ``redis-server`` on ``port`` with the append-only file in
    ``data_dir`` (the mounted volume) and without key eviction.

    Raises:
        AssertionError: naming the missing or wrong option.
    """
    assert args[0] == "redis-server" and len(args) % 2 == 1, args
    options = dict(zip(args[1::2], args[2::2]))
    assert options.get("--appendonly") == "yes", options
    assert options.get("--maxmemory-policy") == "noeviction", options
    assert options.get("--dir") == data_dir, (options, data_dir)
    assert int(options.get("--port", REDIS_DEFAULT_PORT)) == port, (options, port)

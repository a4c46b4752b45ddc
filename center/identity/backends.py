"""Identity store backends by config ``type``: ``sqlite`` (embedded, one host) and ``redis`` (several hosts)."""

from __future__ import annotations

from typing import Any, Callable

from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import IdentityStore
from vcascade.core.state_dir import state_path


def _sqlite(cfg: Any, space: str, exemplars: int) -> IdentityStore:
    return SqliteStore(state_path(cfg.path), space, cfg.timeout_s, cfg.file_mode, cfg.dir_mode, exemplars)


def _redis(cfg: Any, space: str, exemplars: int) -> IdentityStore:
    return RedisStore(cfg.url, space, cfg.timeout_s, cfg.key_prefix, exemplars)


STORES: dict[str, Callable[[Any, str, int], IdentityStore]] = {"sqlite": _sqlite, "redis": _redis}
"""Store builders by config ``type``: ``(store config, space name, exemplars kept per identity) -> store``."""


def build_store(cfg: Any, space: str, exemplars: int = 0) -> IdentityStore:
    """The store a ``SqliteStoreConfig`` / ``RedisStoreConfig`` describes, for identity space ``space``, keeping
    ``exemplars`` gallery looks per identity besides its enrolment embedding (0: none).

    Raises:
        KeyError: unknown ``type``. ImportError: the backend's client library is missing (fails the start).
    """
    try:
        builder = STORES[cfg.type]
    except KeyError:
        raise KeyError(f"unknown identity store type {cfg.type!r}; known: {sorted(STORES)}") from None
    return builder(cfg, space, exemplars)

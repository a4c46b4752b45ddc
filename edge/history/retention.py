"""Retention of the history: per-camera and edge-wide limits in days and in bytes, oldest rows evicted first
(docs/HISTORY.md). Run by the writer thread every ``retention_interval_s``; each eviction is counted by the caller.

Order of one check: each camera's own ``max_days``, the edge's ``max_days``, each camera's own ``max_bytes``, then
the edge's ``max_bytes`` over the whole store. Bytes are the evidence files plus
:data:`~vcascade.edge.history.store.ROW_BYTES` per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from vcascade.core.schema.history import HistoryConfig, HistoryLimits
from vcascade.edge.history.store import Evicted, HistoryStore

EVICT_BATCH = 2000
"""Rows removed per transaction (a long eviction never holds the write lock for long)."""

MAX_ROUNDS = 50
"""Batches per limit in one check at most; what is left waits for the next check."""

DAY_MS = 86_400_000.0


@dataclass(frozen=True)
class Limit:
    """One limit to apply: over ``camera``'s rows (None: the whole store), ``days`` or ``bytes``."""

    camera: str | None
    kind: str
    value: float


def limits(cfg: HistoryConfig, cameras: Mapping[str, HistoryLimits | None]) -> list[Limit]:
    """The limits of one check, in the order of the module docstring."""
    own = {cam: lim for cam, lim in cameras.items() if lim is not None}
    found = [Limit(cam, "days", lim.max_days) for cam, lim in own.items() if lim.max_days is not None]
    if cfg.max_days is not None:
        found.append(Limit(None, "days", cfg.max_days))
    found += [Limit(cam, "bytes", lim.max_bytes) for cam, lim in own.items() if lim.max_bytes is not None]
    if cfg.max_bytes is not None:
        found.append(Limit(None, "bytes", cfg.max_bytes))
    return found


def apply(store: HistoryStore, todo: list[Limit], now_ms: float) -> Iterator[tuple[Evicted, Limit]]:
    """Evict what ``todo`` says is too old or too much, batch by batch; yields each row removed with its limit
    (the caller deletes its files and counts it). Raises the store's :class:`~vcascade.edge.history.store.StoreDown`."""
    for limit in todo:
        for _ in range(MAX_ROUNDS):
            if limit.kind == "days":
                batch = store.evict_older(now_ms - limit.value * DAY_MS, limit.camera, EVICT_BATCH)
            else:
                batch = store.evict_over(int(limit.value), limit.camera, EVICT_BATCH)
            for row in batch:
                yield row, limit
            if len(batch) < EVICT_BATCH:
                break

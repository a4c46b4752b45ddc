"""Every ``vcascade_identity_*`` family moves when its event happens: an embedding head on a real redis-server,
a second worker's head beside it, the store stopped and started again."""

from __future__ import annotations

import numpy as np
from prometheus_client import REGISTRY

from vcascade.center.identity import IdentityHead, RedisStore
from vcascade.center.identity.metrics import STORE_OPS
from vcascade.core.config import EmbeddingHeadConfig

D = 12


def value(name: str, worker: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, {"worker": worker, **labels}) or 0.0


def head(server, worker: str, id_block: int = 4) -> IdentityHead:
    cfg = EmbeddingHeadConfig.model_validate({
        "match_threshold": 0.8, "identity": {"store": {"type": "redis", "url": server.url, "timeout_s": 0.5},
                                             "id_block": id_block, "sync_interval_s": 60}})  # fmt: skip
    return IdentityHead.from_config(cfg, "embedder", worker)  # its sync runs one cycle now; the test runs the rest


def obj(i: int) -> np.ndarray:
    return np.eye(D, dtype=np.float32)[i][None]


def test_every_identity_metric_moves_with_its_event(redis_server):
    a, b = head(redis_server, "idm-a"), head(redis_server, "idm-b")
    a(obj(0))  # enrolment
    a(obj(0))  # match
    assert value("vcascade_identity_enrolments_total", "idm-a") == 1
    assert value("vcascade_identity_matches_total", "idm-a") == 1
    assert value("vcascade_identity_gallery_size", "idm-a") == 1
    assert value("vcascade_identity_comparisons_total", "idm-a") == 1  # the match compared with the one identity
    b(obj(1))  # one object enrolled by both workers at once
    a(obj(1))
    for sync in (a.sync, b.sync, a.sync):
        sync.cycle()
    merges = sum(value("vcascade_identity_merges_total", w, kind="duplicate") for w in ("idm-a", "idm-b"))
    assert merges == 1
    assert value("vcascade_identity_store_seconds_count", "idm-a", op="write") >= 1

    a(obj(0))  # a match not yet pushed when the store evicts every identity
    RedisStore(redis_server.url, "embedder").sweep(now_s=1e12, retention_s=1.0, capacity=0)
    a.sync.cycle()
    assert value("vcascade_identity_dropped_updates_total", "idm-a") == 1

    redis_server.stop()
    assert not a.sync.cycle()
    assert sum(value("vcascade_identity_store_errors_total", "idm-a", op=op)
               for op in STORE_OPS) >= 1  # fmt: skip
    for i in range(2, 8):  # more new objects than reserved ids: provisional ids
        a(obj(i))
    assert value("vcascade_identity_provisional_results_total", "idm-a") == 6
    redis_server.start()
    assert a.sync.cycle()
    assert value("vcascade_identity_merges_total", "idm-a", kind="reconciled") >= 1
    a.close()
    b.close()

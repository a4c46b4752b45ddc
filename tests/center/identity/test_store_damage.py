"""A damaged or emptied identity store on a real redis-server (issue 28, item 6): a malformed record is skipped
and counted and never stops the pull of the others; a vector of the wrong size likewise; a store that lost its
data (flushed, counter set back) is noticed and counted, and no id at or below one already seen is handed out,
not even by a worker restarted after the loss (its watermark file)."""

from __future__ import annotations

import os
import stat
import time

import numpy as np
import pytest
import redis
from prometheus_client import REGISTRY

from vcascade.center.identity.guard import IdGuard
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.store import Sighting
from vcascade.center.identity.sync import StoreSync

D = 64
made = 0


class Worker:
    """One worker's space, sync and (optionally) watermark file; cycles run by hand."""

    def __init__(self, url: str, guard_path=None, name: str = "dmg") -> None:
        global made
        made += 1
        self.name = f"{name}-{made}"  # metrics from 0 in every worker
        self.space = IdentitySpace(0.8, 1000, "exact", None)
        telemetry = IdentityTelemetry(self.name)
        self.sync = StoreSync(self.space, RedisStore(url, "embedder", timeout_s=2.0), telemetry, 0.05, 4, 86_400.0,
                              1000, guard=IdGuard(guard_path, telemetry))  # fmt: skip
        assert self.sync.cycle()

    def see(self, i: int) -> int:
        v = np.random.default_rng(i).standard_normal((1, D)).astype(np.float32)  # objects far apart (cos ~ 0.1)
        (out,), _ = self.space.match(v / np.linalg.norm(v), [Sighting("cam", 0.0, time.time())])
        return out.identity_id

    def metric(self, name: str, **labels) -> float:
        return REGISTRY.get_sample_value(name, {"worker": self.name, **labels}) or 0.0

    def close(self) -> None:
        self.sync.close()


@pytest.fixture
def client(redis_server):
    with redis.Redis.from_url(redis_server.url) as raw:
        yield raw


def _key(ident: int) -> str:
    return f"vcascade:identity:embedder:id:{ident}"


def test_a_malformed_record_is_skipped_and_counted_and_the_others_still_sync(redis_server, client):
    a = Worker(redis_server.url)
    ids = [a.see(i) for i in range(3)]
    assert a.sync.cycle() and min(ids) >= 1
    client.hset(_key(ids[1]), "count", "not-a-number")  # another program, or someone with access, wrote this
    b = Worker(redis_server.url)
    assert b.space.in_sync and len(b.space) == 2
    assert b.metric("vcascade_identity_store_records_skipped_total", reason="malformed") == 1
    later = a.see(5)  # the pull is not stuck on the bad record: news after it still arrives
    assert a.sync.cycle() and b.sync.cycle() and b.space.in_sync
    assert len(b.space) == 3 and b.see(5) == later
    a.close(), b.close()


def test_a_vector_of_the_wrong_size_is_counted_and_the_valid_ones_pulled_with_it_are_kept(redis_server, client):
    a = Worker(redis_server.url)
    ids = [a.see(i) for i in range(4)]  # one block: all four get store ids
    assert a.sync.cycle() and min(ids) >= 1
    client.hset(_key(ids[0]), "sum", np.ones(D + 4, np.float32).tobytes())
    client.hset(_key(ids[2]), "sum", b"\x00\x01\x02")  # not whole float32s: malformed
    b = Worker(redis_server.url)
    assert b.space.in_sync and len(b.space) == 2 and [b.see(i) for i in (1, 3)] == [ids[1], ids[3]]
    assert b.metric("vcascade_identity_store_records_skipped_total", reason="wrong_length") == 1
    assert b.metric("vcascade_identity_store_records_skipped_total", reason="malformed") == 1
    a.close(), b.close()


def test_a_flushed_store_is_noticed_and_ids_already_given_are_never_handed_out_again(redis_server, client, tmp_path):
    watermark = tmp_path / "state" / "identity-ids.embedder.w.json"
    a = Worker(redis_server.url, watermark)
    before = [a.see(i) for i in range(6)]  # two blocks of 4: ids 1-8 reserved
    assert a.sync.cycle()
    a.close()
    assert stat.S_IMODE(os.stat(watermark).st_mode) == 0o600
    client.flushall()  # Redis restarted without persistence, or flushed
    restarted = Worker(redis_server.url, watermark)  # the same worker after a restart: only its file remembers
    after = [restarted.see(i + 10) for i in range(6)]
    assert restarted.sync.cycle()
    given = [i for i in after if i > 0]  # store ids (the provisional ones get theirs in a later cycle)
    assert len(given) >= 4 and min(given) > max(before), (before, after)
    assert restarted.metric("vcascade_identity_store_resets_total", reason="generation_changed") == 1
    restarted.close()


def test_an_id_counter_set_back_is_noticed_and_its_ids_refused(redis_server, client):
    a = Worker(redis_server.url)
    before = [a.see(i) for i in range(6)]
    assert a.sync.cycle()
    client.set("vcascade:identity:embedder:next_id", 0)  # the counter went back, the generation did not change
    after = [a.see(i + 10) for i in range(6)]
    assert a.sync.cycle()
    given = [i for i in after if i > 0]
    assert len(given) >= 4 and min(given) > max(before), (before, after)
    assert a.metric("vcascade_identity_store_resets_total", reason="ids_went_back") == 1
    assert a.metric("vcascade_identity_ids_refused_total") >= 1
    a.close()

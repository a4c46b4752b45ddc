"""A centroid that forgets (``identity.centroid_window``): past the window each look moves the mean by 1/window,
written as an additive change so the store sums every worker's changes as before; without a window the centroid
is the mean of every look."""

from __future__ import annotations

import time

import numpy as np

from vcascade.center.identity.centroid import look_delta
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import LIVE, Sighting
from vcascade.center.identity.sync import StoreSync

D = 16


def unit(angle: float) -> np.ndarray:
    """Unit vector at ``angle`` radians in the plane of the first two axes."""
    v = np.zeros(D, np.float32)
    v[:2] = np.cos(angle), np.sin(angle)
    return v


def test_below_the_window_a_look_adds_itself_and_past_it_moves_the_mean_by_one_window_th():
    total, count = unit(0.0) * 3, 3
    change, added = look_delta(total, count, unit(0.3), window=4)
    np.testing.assert_allclose(change, unit(0.3))
    assert added == 1
    total, count = total + change, count + added  # 4 looks: the window is full
    mean = total / count
    change, added = look_delta(total, count, unit(1.0), window=4)
    assert added == 0
    np.testing.assert_allclose((total + change) / count, mean + (unit(1.0) - mean) / 4, atol=1e-6)
    merged = look_delta(total * 2, count * 2, unit(1.0), window=4)  # a merge doubled it: never lowered by a look
    assert merged[1] == 0
    np.testing.assert_allclose(merged[0], unit(1.0) - total / count, atol=1e-6)
    np.testing.assert_allclose(look_delta(total, count, unit(1.0), window=0)[0], unit(1.0))  # 0: never forgets


def seen() -> Sighting:
    return Sighting("cam1", 0.0, time.time())


def drifted_centroid(window: int) -> np.ndarray:
    """The centroid of one identity after 40 looks at angle 0, then 40 drifting to 0.6 rad (all within the match
    threshold of the centroid as it goes)."""
    sp = IdentitySpace(0.8, 100, centroid_window=window)
    angles = [0.0] * 40 + list(np.linspace(0.0, 0.6, 40))
    outs = [sp.match(unit(a)[None], [seen()])[0][0] for a in angles]
    assert len({out.identity_id for out in outs}) == 1
    return sp._units[sp._slot[outs[0].identity_id]]


def test_a_centroid_with_a_window_follows_the_object_and_one_without_lags_behind():
    with_window, without = drifted_centroid(10), drifted_centroid(0)
    assert with_window @ unit(0.6) > 0.99  # within a few looks of the latest
    assert without @ unit(0.6) < 0.97  # the mean of every look: still near the first ones
    assert without @ unit(0.15) > 0.99


def test_two_workers_forgetting_through_one_store_agree_on_the_centroid(tmp_path):
    """Both workers' changes are added by the store: after a sync, both copies and the store hold one identity with
    the window's count (one more: the other worker's look while the window filled had not reached this copy yet)
    and the mean both copies computed."""
    path = tmp_path / "ids.sqlite"
    workers = []
    for k in range(2):
        space = IdentitySpace(0.8, 100, centroid_window=5)
        sync = StoreSync(space, SqliteStore(path, "people"), IdentityTelemetry(f"centroid-{k}"), 0.05, 8, 86_400.0,
                         100)
        sync.cycle()
        workers.append((space, sync))
    (a, a_sync), (b, b_sync) = workers
    first = a.match(unit(0.0)[None], [seen()])[0][0].identity_id
    a_sync.cycle()
    b_sync.cycle()
    for k, angle in enumerate(np.linspace(0.0, 0.5, 20)):
        space, sync = workers[k % 2]
        assert space.match(unit(angle)[None], [seen()])[0][0].identity_id == first
        sync.cycle()
    a_sync.cycle()
    b_sync.cycle()
    records, _ = SqliteStore(path, "people").changes(0)
    (record,) = [r for r in records if r.state == LIVE]
    assert record.identity_id == first and record.count in (5, 6)
    stored = record.vector_sum / np.linalg.norm(record.vector_sum)
    for space in (a, b):
        np.testing.assert_allclose(space._units[space._slot[first]], stored, atol=1e-5)
    assert stored @ unit(0.5) > stored @ unit(0.0)  # it followed the latest looks

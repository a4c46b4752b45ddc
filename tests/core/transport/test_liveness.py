"""Exhaustive tests of the pure peer-liveness table (no sockets, explicit time)."""

from __future__ import annotations

import random

import pytest

from vcascade.core.transport.liveness import PeerLiveness

# ---------------------------------------------------------------- heard, alive


def test_a_peer_is_unknown_until_its_first_message():
    table = PeerLiveness(window_s=3.0, max_peers=4)
    assert len(table) == 0 and "b0" not in table
    assert not table.alive("b0", 0.0) and table.last_heard_s("b0") is None
    assert table.heard("b0", 10.0) is True  # first message: comes to life
    assert table.heard("b0", 10.5) is False  # already known
    assert "b0" in table and table.last_heard_s("b0") == 10.5


def test_alive_within_the_window_and_exactly_at_it():
    table = PeerLiveness(window_s=2.0, max_peers=4)
    table.heard("w", 1.0)
    assert table.alive("w", 1.0) and table.alive("w", 3.0)  # exactly the window: still alive
    assert not table.alive("w", 3.01)
    assert "w" in table  # the clock check does not forget: only expired() does


def test_any_message_restarts_the_window():
    table = PeerLiveness(window_s=2.0, max_peers=4)
    table.heard("w", 0.0)
    table.heard("w", 1.5)
    assert table.alive("w", 3.5) and table.expired(3.5) == []
    assert not table.alive("w", 3.6)


# ---------------------------------------------------------------- expired


def test_silence_longer_than_the_window_expires_a_peer_once():
    table = PeerLiveness(window_s=2.0, max_peers=4)  # e.g. liveness 4 x interval 0.5 s
    table.heard(0, 0.0)
    assert table.expired(2.0) == []  # exactly the window: still alive
    assert table.expired(2.01) == [0]
    assert table.expired(3.0) == []  # reported once
    assert 0 not in table and not table.alive(0, 2.01) and table.last_heard_s(0) is None
    assert table.heard(0, 3.1) is True  # its next message brings it back


def test_a_peer_never_heard_is_never_expired():
    table = PeerLiveness(window_s=1.0, max_peers=4)
    assert table.expired(1e6) == []


def test_expired_lists_the_least_recently_heard_first_and_keeps_the_rest():
    table = PeerLiveness(window_s=3.0, max_peers=8)
    for peer, t in (("c", 0.0), ("a", 0.5), ("b", 1.0), ("d", 5.0)):
        table.heard(peer, t)
    table.heard("c", 1.2)  # heard again: now the most recent of the silent ones
    assert table.expired(4.3) == ["a", "b", "c"]
    assert list(table) == ["d"] and len(table) == 1


def test_edges_are_live_within_the_window_and_forgotten_after():
    """The broker's edges: expire the silent, heartbeat the rest (least recently heard first)."""
    table = PeerLiveness(window_s=3.0, max_peers=4096)
    table.heard(b"e1", 0.0)
    table.heard(b"e2", 1.0)
    assert table.expired(3.0) == [] and list(table) == [b"e1", b"e2"]  # exactly at the window is still live
    assert table.expired(3.5) == [b"e1"] and list(table) == [b"e2"] and len(table) == 1
    table.heard(b"e1", 3.6)  # heard again: live again
    assert table.expired(4.0) == [] and list(table) == [b"e2", b"e1"]
    table.forget(b"e2")
    table.forget(b"never")
    assert table.expired(4.0) == [] and list(table) == [b"e1"]


def test_iteration_is_a_snapshot_so_peers_can_be_forgotten_on_the_way():
    table = PeerLiveness(window_s=3.0, max_peers=4)
    for peer in "abc":
        table.heard(peer, 0.0)
    for peer in table:
        table.forget(peer)
    assert len(table) == 0


# ---------------------------------------------------------------- forget


def test_forget_removes_at_once_and_says_whether_the_peer_was_known():
    table = PeerLiveness(window_s=3.0, max_peers=4)
    table.heard("b", 0.0)
    assert table.forget("b") is True  # e.g. its connection closed: dead before the window ends
    assert table.forget("b") is False and table.forget("never") is False
    assert not table.alive("b", 0.0) and table.expired(100.0) == []
    assert table.heard("b", 1.0) is True


def test_a_peer_heard_at_time_zero_is_forgotten_like_any_other():
    table = PeerLiveness(window_s=3.0, max_peers=4)
    table.heard("b", 0.0)
    assert table.forget("b") is True


# ---------------------------------------------------------------- bound


def test_the_table_is_bounded_least_recently_heard_first():
    table = PeerLiveness(window_s=10.0, max_peers=3)
    assert [table.heard(f"e{i}".encode(), float(i)) for i in range(3)] == [True, True, True]
    table.heard(b"e0", 3.0)  # e0 refreshed: e1 is now the least recently heard
    assert table.heard(b"e3", 4.0) is True and len(table) == 3
    assert b"e1" not in table
    assert table.expired(4.0) == [] and sorted(table) == [b"e0", b"e2", b"e3"]
    assert table.heard(b"e1", 5.0) is True  # an evicted peer is known again at its next message
    assert b"e2" not in table


def test_refreshing_a_known_peer_never_evicts():
    table = PeerLiveness(window_s=10.0, max_peers=2)
    table.heard("a", 0.0)
    table.heard("b", 0.0)
    for t in range(1, 10):
        table.heard("a", float(t))
    assert sorted(table) == ["a", "b"]


@pytest.mark.parametrize(("window_s", "max_peers"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bad_bounds_rejected(window_s, max_peers):
    with pytest.raises(ValueError):
        PeerLiveness(window_s=window_s, max_peers=max_peers)


# ---------------------------------------------------------------- randomized, against a plain model


@pytest.mark.parametrize("seed", range(20))
def test_random_events_match_a_plain_model(seed):
    """Random heard/forget/expired/alive on a few peers and a small bound, checked against a dict that keeps
    the same rules in the plainest way (insertion order = the order of the last message)."""
    rng = random.Random(seed)
    window_s, max_peers = rng.choice([0.05, 0.5, 2.0]), rng.randint(1, 4)
    table: PeerLiveness[int] = PeerLiveness(window_s, max_peers)
    model: dict[int, float] = {}
    now_s = 0.0
    for _ in range(400):
        now_s += rng.choice([0.0, 0.01, 0.1, 1.0])
        peer, event = rng.randrange(6), rng.choice(["heard", "heard", "heard", "forget", "expired", "alive"])
        if event == "heard":
            assert table.heard(peer, now_s) is (peer not in model)
            model.pop(peer, None)
            model[peer] = now_s
            if len(model) > max_peers:
                del model[next(iter(model))]
        elif event == "forget":
            assert table.forget(peer) is (model.pop(peer, None) is not None)
        elif event == "expired":
            silent = [p for p, t in model.items() if now_s - t > window_s]
            assert table.expired(now_s) == silent
            for p in silent:
                del model[p]
        else:
            assert table.alive(peer, now_s) is (peer in model and now_s - model[peer] <= window_s)
        assert list(table) == list(model) and len(table) == len(model) <= max_peers
        assert all(table.last_heard_s(p) == t for p, t in model.items())

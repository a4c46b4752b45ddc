"""The edge link's pure rules: broker liveness, broker choice, probes, retry bound."""

import pytest

from vcascade.edge.link.state import BrokerTable, may_retry


def _table(n=2, interval_s=1.0, liveness=3):
    return BrokerTable([f"b{i}" for i in range(n)], interval_s, liveness)


def test_brokers_start_dead_and_any_message_revives():
    table = _table()
    assert not table.any_alive and table.choose() is None
    assert table.heard(1, now_s=10.0) is True
    assert table.heard(1, now_s=10.5) is False  # already alive
    assert table.any_alive and table.choose() == 1


def test_silence_longer_than_liveness_intervals_kills_a_broker():
    table = _table(interval_s=0.5, liveness=4)  # dead after 2.0 s of silence
    table.heard(0, now_s=0.0)
    assert table.expire(now_s=2.0) == []  # exactly the window: still alive
    assert table.expire(now_s=2.01) == [0]
    assert table.expire(now_s=3.0) == []  # reported once
    assert not table.alive(0)
    assert table.heard(0, now_s=3.1) is True


def test_never_heard_broker_is_not_declared_dead_again():
    table = _table()
    assert table.expire(now_s=1e6) == []


def test_heartbeat_due_once_per_interval_and_at_start():
    table = _table(interval_s=1.0)
    assert table.heartbeat_due(5.0) is True
    assert table.heartbeat_due(5.9) is False
    assert table.heartbeat_due(6.0) is True


def test_choice_is_least_in_flight_among_live_brokers():
    table = _table(n=3)
    for i in range(3):
        table.heard(i, 0.0)
    table.sent(0)
    table.sent(0)
    table.sent(1)
    assert table.choose() == 2
    table.sent(2)
    table.sent(2)
    assert table.choose() == 1
    table.settled(0)
    table.settled(0)
    assert table.choose() == 0


def test_ties_go_round_robin():
    table = _table(n=3)
    for i in range(3):
        table.heard(i, 0.0)
    picks = []
    for _ in range(6):
        i = table.choose()
        picks.append(i)
        table.sent(i)
        table.settled(i)  # answered at once: in-flight stays equal
    assert picks == [0, 1, 2, 0, 1, 2]


def test_never_sends_to_a_dead_broker():
    table = _table(n=2)
    table.heard(0, 0.0)
    table.heard(1, 0.0)
    table.heard(1, 5.0)
    assert table.expire(5.0) == [0]
    for _ in range(5):
        assert table.choose() == 1
        table.sent(1)  # even with more in flight than the dead one


def test_retry_avoids_its_last_broker_unless_it_is_the_only_live_one():
    table = _table(n=2)
    table.heard(0, 0.0)
    table.heard(1, 0.0)
    table.sent(1)
    table.sent(1)
    assert table.choose(avoid=0) == 1  # the other live broker, even though busier
    table.lost(1)
    assert table.choose(avoid=0) == 0


def test_refused_brokers_are_excluded_for_the_round():
    table = _table(n=2)
    table.heard(0, 0.0)
    table.heard(1, 0.0)
    assert table.choose(exclude={0}) == 1
    assert table.choose(exclude={0, 1}) is None


def test_one_probe_at_a_time_to_a_broker_not_alive():
    table = _table(n=2)
    table.heard(0, 0.0)
    assert table.probe_target() == 1
    table.sent(1)
    assert table.probe_target() is None  # its probe is still out
    table.settled(1)
    assert table.probe_target(exclude={1}) is None


def test_settled_never_goes_negative_and_sent_counts_every_send():
    table = _table(n=1)
    table.settled(0)
    assert table.states[0].in_flight == 0
    table.sent(0)
    table.sent(0)
    assert table.states[0].sent == 2 and table.states[0].in_flight == 2


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [(0, 1, False), (0, 2, True), (1, 2, False), (1, 3, True), (2, 3, False)],
)
def test_retry_bound_counts_every_send(attempt, max_attempts, expected):
    assert may_retry(attempt, max_attempts) is expected


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        BrokerTable([], 1.0, 3)
    with pytest.raises(ValueError):
        BrokerTable(["b"], 0.0, 3)

"""Counts kept in plain ints and published at a tick read, once published, exactly as counts made directly."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S
from vcascade.core.telemetry.tally import CounterTally, HistogramTally


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    """Every sample but the ``_created`` timestamps, by (name, labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_a_histogram_tally_publishes_what_observe_would_have():
    """Values on every bucket bound, between bounds, below the first and above the last (+Inf), and 0."""
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    h_direct = Histogram("t_seconds", "t", ["broker"], buckets=LATENCY_BUCKETS_S, registry=direct).labels(broker="b")
    h_tallied = Histogram("t_seconds", "t", ["broker"], buckets=LATENCY_BUCKETS_S, registry=tallied).labels(broker="b")
    tally = HistogramTally(h_tallied)
    rng = random.Random(7)
    finite = [b for b in LATENCY_BUCKETS_S if b != float("inf")]
    values = [*finite, 0.0, 0.0004, 7.5, 1e9, *(rng.uniform(0, 6) for _ in range(500))]
    for i, value in enumerate(values):
        h_direct.observe(value)
        tally.observe(value)
        if i % 97 == 0:
            tally.publish()
    assert _samples(tallied)[("t_seconds_count", (("broker", "b"),))] < len(values)  # not all published yet
    tally.publish()
    assert _samples(tallied) == pytest.approx(_samples(direct), rel=1e-12)  # the sum: added in another order
    tally.publish()  # nothing new: nothing added
    assert _samples(tallied) == pytest.approx(_samples(direct), rel=1e-12)
    counts = {k: v for k, v in _samples(tallied).items() if not k[0].endswith("_sum")}
    assert counts == {k: v for k, v in _samples(direct).items() if not k[0].endswith("_sum")}


def test_a_counter_tally_adds_its_counts_at_publish_and_starts_again():
    registry = CollectorRegistry()
    family = Counter("t_total", "t", ["camera"], registry=registry)
    bound: list[str] = []

    def child(camera: str) -> Counter:
        bound.append(camera)
        return family.labels(camera=camera)

    tally: CounterTally[str] = CounterTally(child)
    tally.counts["c1"] += 1
    tally.add("c2", 3)
    tally.counts["c1"] += 1
    assert registry.get_sample_value("t_total", {"camera": "c1"}) is None  # counted, not yet published
    tally.publish()
    assert registry.get_sample_value("t_total", {"camera": "c1"}) == 2
    assert registry.get_sample_value("t_total", {"camera": "c2"}) == 3
    assert bound == ["c1", "c2"]  # first counted, first published
    tally.add("c2")
    tally.publish()
    tally.publish()
    assert registry.get_sample_value("t_total", {"camera": "c2"}) == 4
    assert not tally.counts

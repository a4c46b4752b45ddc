"""Counting in plain ints on the thread that owns a loop, published into prometheus-client at the loop's tick.

A prometheus-client ``inc()`` takes a lock (about 1 us), ``labels()`` builds and looks up a key (about 2 us) and a
histogram's ``observe()`` walks its buckets under two locks (about 3 us; measured with ``timeit`` on the 2-core CI
host, issue 32). A loop that counts several events per message (the broker: an ROI received per camera, dispatched
per recognizer, its queue time) spent more on counting than on much of its own work. A :class:`CounterTally` or a
:class:`HistogramTally` counts in plain ints, and adds what it counted to the metric's children when the owning
thread calls ``publish()``, at its housekeeping tick: a scrape sees the counts at most one tick late, and the
totals are the same.

Not thread-safe: one thread counts and publishes (prometheus-client's own locks keep a publish safe against a
scrape on another thread).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from prometheus_client import Counter, Histogram

Key = TypeVar("Key", bound=Hashable)


class CounterTally(Generic[Key]):
    """Counts of one counter family by key (a label value, a tuple of them, or a raw name the publish maps to
    one), since the last :meth:`publish`.

    Count with ``tally.counts[key] += n`` (a ``defaultdict(int)``: the cheapest count Python has) or
    :meth:`add`. Memory: one entry per key counted since the last publish.

    Args:
        child: the metric child of a key (``lambda camera: FAMILY.labels(..., camera=label_of(camera))``), called
            at publish only; caching children, and bounding the label values, is the caller's.
    """

    def __init__(self, child: Callable[[Key], Counter]) -> None:
        self.counts: defaultdict[Key, int] = defaultdict(int)
        """Counted since the last publish, by key."""
        self._child = child

    def add(self, key: Key, n: int = 1) -> None:
        """Count ``n`` (>= 0) events of ``key``."""
        self.counts[key] += n

    def publish(self) -> None:
        """Add the counts to the children, in the order the keys were first counted; start again from 0."""
        for key, n in self.counts.items():
            if n:
                self._child(key).inc(n)
        self.counts.clear()


class HistogramTally:
    """Observations of one histogram child counted per bucket, added to the child by :meth:`publish`.

    Args:
        child: a ``prometheus_client.Histogram`` child (its labels bound); its buckets are used.
    """

    def __init__(self, child: Histogram) -> None:
        self._child = child
        self._upper_bounds: tuple[float, ...] = tuple(child._upper_bounds)  # no public accessor; ends with +Inf
        self.counts = [0] * len(self._upper_bounds)
        """Observations per bucket since the last publish (not cumulative: bucket ``i`` holds values in
        ``(bound[i-1], bound[i]]``)."""
        self.sum = 0.0
        """Sum of the observations since the last publish."""

    def observe(self, value: float) -> None:
        """Count one observation of ``value`` (not NaN) into the first bucket whose upper bound is >= ``value``,
        as ``Histogram.observe`` does."""
        self.counts[bisect_left(self._upper_bounds, value)] += 1
        self.sum += value

    def publish(self) -> None:
        """Add the bucket counts and the sum to the child; start again from 0.

        prometheus-client has no public call that adds many observations at once: this adds to the child's
        per-bucket values (``_buckets``, not cumulative, the sum in ``_sum``), which is what ``observe`` itself
        does one value at a time (tests/core/telemetry/test_tally.py checks the exposition is the same).
        """
        if not any(self.counts):
            return
        buckets = self._child._buckets
        for i, n in enumerate(self.counts):
            if n:
                buckets[i].inc(n)
                self.counts[i] = 0
        self._child._sum.inc(self.sum)
        self.sum = 0.0

"""The edges a broker heard from recently: the peers its frontend heartbeats go to. Pure, bounded, no clock.

Per the heartbeat protocol (DESIGN.md "Load balancing and reliability"), the broker sends a ``Heartbeat`` every
``interval_s`` to each edge heard from within the liveness window (``liveness * interval_s``). Workers are
tracked by :class:`vcascade.broker.dispatch.Dispatcher`; edges are only routing ids plus a last-seen time, kept here.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_EDGES = 4096
"""Edges remembered at most; the least recently heard is forgotten first (a peer cycling identities cannot
grow memory). A forgotten edge still gets its answers (they carry its routing id), only no heartbeats."""


class EdgeTable:
    """Routing ids of edges with the time each was last heard from.

    Args:
        window_s: an edge silent longer than this is no longer heartbeated, seconds (> 0).
        max_edges: edges remembered at most (>= 1).

    Raises:
        ValueError: ``window_s <= 0`` or ``max_edges < 1``.
    """

    def __init__(self, window_s: float, max_edges: int = MAX_EDGES) -> None:
        if window_s <= 0 or max_edges < 1:
            raise ValueError(f"need window_s > 0 and max_edges >= 1, got {window_s}, {max_edges}")
        self.window_s = window_s
        self.max_edges = max_edges
        self._last_seen_s: OrderedDict[bytes, float] = OrderedDict()  # least recently heard first

    def __len__(self) -> int:
        """Number of edges remembered."""
        return len(self._last_seen_s)

    def seen(self, edge: bytes, now_s: float) -> int:
        """Record a message from ``edge`` at ``now_s`` (seconds). Returns how many edges were forgotten (0/1)."""
        self._last_seen_s[edge] = now_s
        self._last_seen_s.move_to_end(edge)
        if len(self._last_seen_s) > self.max_edges:
            self._last_seen_s.popitem(last=False)
            return 1
        return 0

    def forget(self, edge: bytes) -> None:
        """Stop heartbeating ``edge`` (it is unreachable)."""
        self._last_seen_s.pop(edge, None)

    def live(self, now_s: float) -> list[bytes]:
        """Edges heard from within ``window_s`` of ``now_s``; silent ones are forgotten on the way."""
        while self._last_seen_s:
            edge, seen_s = next(iter(self._last_seen_s.items()))
            if now_s - seen_s <= self.window_s:
                break
            del self._last_seen_s[edge]
        return list(self._last_seen_s)

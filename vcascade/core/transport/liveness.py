"""Peer liveness: who was heard from when, and who has been silent too long. Pure, bounded, no clock.

The heartbeat rule of every link (Paranoid Pirate, ZeroMQ Guide ch. 4; DESIGN.md "Heartbeats"): any message
from a peer proves it alive; a peer silent for more than ``window_s`` (``heartbeat.liveness *
heartbeat.interval_s``) is dead. One table serves every side of every link: the edge's brokers
(:class:`vcascade.edge.link.state.BrokerTable`), the worker's brokers (:mod:`vcascade.center.worker`), the
broker's workers (:class:`vcascade.broker.dispatch.Dispatcher`) and the broker's edges
(:mod:`vcascade.broker.server`). What a side does about a silent peer (retry its ROIs, reconnect with
back-off, re-dispatch, stop heartbeating it) stays with that side.

Callers pass the time (``now_s``, seconds of one monotonic clock such as ``time.perf_counter()``), so every
rule is tested without sockets or sleeps (tests/core/transport/test_liveness.py), like :mod:`vcascade.broker.dispatch`.

A peer is *known* from its first message until :meth:`PeerLiveness.expired` reports it, :meth:`forget`
removes it or it is evicted; :meth:`alive` is the clock check (known and heard within the window).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

Peer = TypeVar("Peer", bound=Hashable)


class PeerLiveness(Generic[Peer]):
    """Last-heard time per peer, least recently heard first, at most ``max_peers`` peers.

    Eviction: hearing a new peer while ``max_peers`` are known forgets the least recently heard one (a peer
    cycling through identities cannot grow memory); it is known again at its next message.

    Args:
        window_s: a peer silent for more than this is dead, seconds (> 0).
        max_peers: peers known at most (>= 1).

    Raises:
        ValueError: ``window_s <= 0`` or ``max_peers < 1``.
    """

    def __init__(self, window_s: float, max_peers: int) -> None:
        if window_s <= 0 or max_peers < 1:
            raise ValueError(f"need window_s > 0 and max_peers >= 1, got {window_s}, {max_peers}")
        self.window_s = window_s
        self.max_peers = max_peers
        self._heard_s: OrderedDict[Peer, float] = OrderedDict()  # in the order of heard() calls, oldest first

    def __len__(self) -> int:
        """Number of known peers."""
        return len(self._heard_s)

    def __contains__(self, peer: object) -> bool:
        """True while ``peer`` is known (heard, and not expired, forgotten or evicted since)."""
        return peer in self._heard_s

    def __iter__(self) -> Iterator[Peer]:
        """The known peers, least recently heard first."""
        return iter(list(self._heard_s))

    def heard(self, peer: Peer, now_s: float) -> bool:
        """Record a message from ``peer`` at ``now_s`` (seconds); evict the least recently heard peer when a new
        one would exceed ``max_peers``.

        Returns:
            True when ``peer`` was not known: its first message, or its first since it expired, was forgotten
            or was evicted (it comes back to life).
        """
        new = peer not in self._heard_s
        self._heard_s[peer] = now_s
        self._heard_s.move_to_end(peer)
        if len(self._heard_s) > self.max_peers:
            self._heard_s.popitem(last=False)
        return new

    def alive(self, peer: Peer, now_s: float) -> bool:
        """True when ``peer`` is known and was heard within ``window_s`` of ``now_s`` (exactly at: alive).

        A single dictionary read: another thread may call it while the owner updates the table (CPython).
        """
        heard_s = self._heard_s.get(peer)
        return heard_s is not None and now_s - heard_s <= self.window_s

    def last_heard_s(self, peer: Peer) -> float | None:
        """Time of the last message from ``peer``, seconds; None when it is not known."""
        return self._heard_s.get(peer)

    def expired(self, now_s: float) -> list[Peer]:
        """Forget and return every peer silent for more than ``window_s`` at ``now_s``, least recently heard
        first. Each silence is reported once; a peer reported is known again at its next message. O(known)."""
        silent = [peer for peer, heard_s in self._heard_s.items() if now_s - heard_s > self.window_s]
        for peer in silent:
            del self._heard_s[peer]
        return silent

    def forget(self, peer: Peer) -> bool:
        """Forget ``peer`` at once (it said goodbye, or its connection is gone). Returns True if it was known."""
        return self._heard_s.pop(peer, None) is not None

"""Event updates: an event raised before its track had any recognition answer is completed by the first answer.

Lines (docs/EVENTS.md; formatted by :mod:`vcascade.edge.sinks.lines`):

* ``event``: :class:`vcascade.edge.way_back.EventRaised`, raised by the detector thread
  (:mod:`vcascade.edge.analytics.camera`) and carried through the broker link's outbox
  (:meth:`BrokerLink.publish`), with the identity (or text) its track had when it fired.
* ``event_update``: :class:`vcascade.edge.way_back.EventUpdated`: an event raised without identity (its track had
  no answer yet) is updated once, by the first answer for that track that comes down the way back after it. The
  event is never held back waiting for recognition: it leaves at once, and the update follows (at-least-once
  consumers join the two by ``event_id``). An event that fired with an identity is not updated when a later crop
  gives another; the ``tracked`` and result lines carry those.

:class:`EventUpdates` is the way back's second consumer, after the identity cache
(:class:`vcascade.edge.way_back.WayBack`): the link thread hands it every event in order, so it sees an event before
any answer that follows it, and the updates it returns are delivered after the answer that caused them.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

from vcascade.edge.analytics.metrics import EVENTS
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity
from vcascade.edge.way_back import Answered, EventRaised, EventUpdated, WayBackEvent

MAX_PENDING_TRACKS = 10_000
"""Tracks whose events wait for a first recognition result, at most per edge; the longest waiting is given up
first (a track the center never answers must not hold memory for ever)."""


def new_event_id() -> str:
    """A fresh event id: 32 hex digits of a random UUID (RFC 4122 version 4), unique across runs and edges."""
    return uuid.uuid4().hex


class EventUpdates:
    """Returns ``event_update`` events (module docstring); link thread only.

    Args:
        edge: the edge's name (metric label).
        identities: the edge's identity cache, given each answer before this (the identity an event raised while
            its track's answer was on its way finds there).
    """

    def __init__(self, edge: str, identities: IdentityCache) -> None:
        self.edge = edge
        self._identities = identities
        self._pending: OrderedDict[tuple[str, int], list[str]] = OrderedDict()
        self.given_up = 0

    def follow_ups(self, event: WayBackEvent) -> list[EventUpdated]:
        """Note an event raised without identity; answer the events of a track with its first answer."""
        if isinstance(event, EventRaised):
            return self._on_event(event)
        if isinstance(event, Answered):
            return self._on_answer(event)
        return []

    def pending(self) -> int:
        """Events waiting for their track's first answer."""
        return sum(len(ids) for ids in self._pending.values())

    def _on_event(self, raised: EventRaised) -> list[EventUpdated]:
        if raised.identity is not None and (
            raised.identity.gallery_identity() is not None or raised.identity.read_text() is not None
        ):
            return []
        key = (raised.camera, raised.event.track_id)
        known = self._identities.get(*key)  # an answer that arrived while the event was queued
        if known is not None:
            return [self._updated(raised.event_id, key, known)]
        self._pending.setdefault(key, []).append(raised.event_id)
        while len(self._pending) > MAX_PENDING_TRACKS:
            _, ids = self._pending.popitem(last=False)
            self.given_up += len(ids)
        return []

    def _on_answer(self, answered: Answered) -> list[EventUpdated]:
        roi = answered.roi
        event_ids = self._pending.pop((roi.camera, roi.track_id), None)
        if not event_ids:
            return []
        identity = TrackIdentity(answered.result.output, roi.roi_id, roi.stream_ts_ms)
        return [self._updated(event_id, (roi.camera, roi.track_id), identity) for event_id in event_ids]

    def _updated(self, event_id: str, key: tuple[str, int], identity: TrackIdentity) -> EventUpdated:
        EVENTS.labels(self.edge, key[0], "event_update").inc()
        return EventUpdated(event_id, key[0], key[1], identity)

"""Event records, and their updates when a track's recognition result arrives after its event.

Records (docs/EVENTS.md; every record a sink gets has a ``kind``):

* ``{"kind": "event", "event_id", "type", "camera", "line" | "zone", "direction" (lines), "class", "track_id",
  "identity_id", "text", "stream_ts_ms", "capture_ts_ms", "dwell_s" (dwell and exit), "track_lost" (exit)}``,
  written by the detector thread through the broker link's outbox (:meth:`BrokerLink.publish`).
* ``{"kind": "event_update", "event_id", "camera", "track_id", "identity_id", "text", "roi_id",
  "stream_ts_ms"}``: an event fired before its track had any recognition result (``identity_id`` and ``text``
  null) is updated once, by the first result for that track that reaches the sinks after it. The event is
  never held back waiting for recognition: it leaves at once, and the update follows (at-least-once consumers
  join the two by ``event_id``). An event that fired with an identity is not updated when a later crop gives
  another; the ``tracked`` and result lines carry those.

:class:`EventUpdates` is a sink of the broker link, after the identity cache: the link thread hands it every
record in order, so it sees an event before any result that follows it, and the update it writes (to the output
sinks, from the same thread) always follows its event.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.analytics.metrics import EVENTS
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity
from vcascade.edge.sinks.registry import Sink

log = logging.getLogger(__name__)

MAX_PENDING_TRACKS = 10_000
"""Tracks whose events wait for a first recognition result, at most per edge; the longest waiting is given up
first (a track the center never answers must not hold memory for ever)."""


def new_event_id() -> str:
    """A fresh event id: 32 hex digits of a random UUID (RFC 4122 version 4), unique across runs and edges."""
    return uuid.uuid4().hex


def event_record(camera: str, event: AnalyticsEvent, identity: TrackIdentity | None, event_id: str) -> dict[str, Any]:
    """The sink record of one event, with the identity (or text) known for its track when it fired (nulls when
    none: an ``event_update`` follows when it arrives)."""
    place = "line" if event.type == "line_cross" else "zone"
    record: dict[str, Any] = {
        "kind": "event", "event_id": event_id, "type": event.type, "camera": camera, place: event.place,
    }
    if event.direction is not None:
        record["direction"] = event.direction
    record.update({
        "class": event.class_name, "track_id": event.track_id, **identity_fields(identity),
        "stream_ts_ms": round(event.stream_ts_ms, 3), "capture_ts_ms": round(event.capture_unix_ms, 3),
    })
    if event.dwell_s is not None:
        record["dwell_s"] = event.dwell_s
    if event.type == "zone_exit":
        record["track_lost"] = event.track_lost
    return record


def identity_fields(identity: TrackIdentity | None) -> dict[str, Any]:
    """``identity_id`` (the gallery identity; null without one, or from a head that gives none) and ``text``
    (the text head's read; null when not a text head) of a track's cached result."""
    if identity is None:
        return {"identity_id": None, "text": None}
    return {
        "identity_id": identity.identity_id if identity.identity_id >= 0 else None,
        "text": identity.extra.get("text"),
    }


def _result_identity(record: dict[str, Any]) -> dict[str, Any]:
    identity_id = record.get("identity_id")
    return {
        "identity_id": identity_id if isinstance(identity_id, int) and identity_id >= 0 else None,
        "text": record.get("text"),
    }


class EventUpdates:
    """Emits ``event_update`` records (module docstring). Implements the :class:`~vcascade.edge.sinks.registry.Sink`
    protocol; link thread only.

    Args:
        edge: the edge's name (metric label).
        identities: the edge's identity cache, a sink of the same link placed before this one.
        sinks: the output sinks the updates are written to.
    """

    def __init__(self, edge: str, identities: IdentityCache, sinks: Sequence[Sink]) -> None:
        self.edge = edge
        self._identities = identities
        self._sinks = list(sinks)
        self._pending: OrderedDict[tuple[str, int], list[str]] = OrderedDict()
        self.given_up = 0

    def write(self, record: dict[str, Any]) -> None:
        """Note an event without identity; answer the events of a track with its first result."""
        if record.get("kind") == "event":
            self._on_event(record)
        elif record.get("status") == "ok":
            self._on_result(record)

    def close(self) -> None:
        """Nothing to release (Sink protocol)."""

    def pending(self) -> int:
        """Events waiting for their track's first result."""
        return sum(len(ids) for ids in self._pending.values())

    def _on_event(self, record: dict[str, Any]) -> None:
        if record.get("identity_id") is not None or record.get("text") is not None:
            return
        camera, track_id = str(record["camera"]), int(record["track_id"])
        known = self._identities.get(camera, track_id)  # a result that arrived while the event was queued
        if known is not None:
            self._emit(record["event_id"], camera, track_id, identity_fields(known), known.roi_id, known.stream_ts_ms)
            return
        self._pending.setdefault((camera, track_id), []).append(str(record["event_id"]))
        while len(self._pending) > MAX_PENDING_TRACKS:
            _, ids = self._pending.popitem(last=False)
            self.given_up += len(ids)

    def _on_result(self, record: dict[str, Any]) -> None:
        try:
            key = (str(record["camera"]), int(record.get("track_id", -1)))
        except (KeyError, TypeError, ValueError):
            return  # the identity cache counts malformed records
        event_ids = self._pending.pop(key, None)
        for event_id in event_ids or ():
            self._emit(event_id, *key, _result_identity(record), record.get("roi_id"), record.get("stream_ts_ms"))

    def _emit(
        self, event_id: str, camera: str, track_id: int, identity: dict[str, Any], roi_id: Any, stream_ts_ms: Any
    ) -> None:
        update = {
            "kind": "event_update", "event_id": event_id, "camera": camera, "track_id": track_id, **identity,
            "roi_id": roi_id, "stream_ts_ms": stream_ts_ms,
        }
        for sink in self._sinks:
            try:
                sink.write(update)
            except Exception:  # as the link's outbox: a failing sink must not stop the others
                log.exception("sink %s failed", type(sink).__name__)
        EVENTS.labels(self.edge, camera, "event_update").inc()

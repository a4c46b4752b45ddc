"""The way back at the edge: what happened to each ROI, track, event and camera, as typed events, delivered to the
edge's consumers in one fixed order.

The link (:class:`vcascade.edge.link.broker_link.BrokerLink`) turns each answer into :class:`Answered` (the
typed :class:`~vcascade.core.protocol.wire.Result`, the ROI it answers and its latency account) or
:class:`Dropped`; the detector thread adds :class:`Tracked` (a followed detection not sent) and
:class:`EventRaised` (a line or zone event, :mod:`vcascade.edge.analytics.camera`), through the link's outbox so
that they keep their order with the answers. :class:`WayBack` hands each event, on the link thread, to:

1. the identity cache (:class:`vcascade.edge.selection.identity_cache.IdentityCache`): an answer becomes its
   track's identity, before anything below reads it;
2. the event updates (:class:`vcascade.edge.analytics.events.EventUpdates`): an answer may complete events raised
   before it; the :class:`EventUpdated` it returns are delivered after the event that caused them;
3. the history store (:class:`vcascade.edge.history.writer.HistoryWriter`): results, events and their identities
   kept for ``vcascade search``, queued for its own thread;
4. the preview (:class:`vcascade.edge.preview.hub.PreviewHub`): the recent answers and events of watched cameras;
5. the output lines (:class:`vcascade.edge.sinks.lines.OutputLines`): the one place that formats events into the
   lines the sinks get (sinks get lines only).

:class:`CameraStateChanged` goes to the history and the lines only: :meth:`WayBack.camera_state` hands it over from
the camera's own thread (the history's and the sinks' queues are thread-safe), so a state change still reaches
them while the link drains.

Nothing here parses a dict: consumers read the events' fields and the head outputs' accessors
(``gallery_identity()``, ``read_text()``, ``short_label()``); only the line formatter names a head's fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, Union

from vcascade.core.protocol.wire import Result, Roi
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.capture.state import Transition
from vcascade.edge.history.event_frame import EventFrame
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answered:
    """An ROI got its result.

    Attributes:
        pending: the edge's record of the ROI (header as last sent, its timestamps, send reason, class name).
        result: the worker's answer, as decoded (its typed head ``output``, hops).
        latency_ms: the closed latency account, ms per hop (:func:`vcascade.edge.link.state.close_account`).
        crop_jpeg: the JPEG crop the edge sent for it (the history's evidence; None: not at hand).
    """

    pending: PendingRoi
    result: Result
    latency_ms: dict[str, float]
    crop_jpeg: bytes | None = None

    @property
    def roi(self) -> Roi:
        return self.pending.roi

    @property
    def camera(self) -> str:
        return self.pending.roi.camera


@dataclass(frozen=True)
class Dropped:
    """An ROI ended without a result (a counted drop): ``reason`` (``timeout``, ``stale``, ... one of the edge's
    or :data:`vcascade.core.protocol.wire.DROP_REASONS`) given by ``where`` (the edge, a broker or a worker)."""

    pending: PendingRoi
    reason: str
    where: str

    @property
    def camera(self) -> str:
        return self.pending.roi.camera


@dataclass(frozen=True)
class Tracked:
    """A followed detection the ROI policy did not send, with its track's last answer (None: none yet).

    ``xyxy``: the box in original-frame pixels; times in ms (PTS; Unix epoch for ``capture_unix_ms``);
    ``class_name``: the detector's name for ``class_id``.
    """

    camera: str
    frame_seq: int
    stream_ts_ms: float
    capture_unix_ms: float
    xyxy: tuple[float, float, float, float]
    class_id: int
    class_name: str
    score: float
    track_id: int
    identity: TrackIdentity | None


@dataclass(frozen=True)
class EventRaised:
    """A line or zone event of a camera, with its track's answer when it fired (None: an :class:`EventUpdated`
    follows when the first answer arrives) and its picture for the history's evidence (None: not taken)."""

    camera: str
    event: AnalyticsEvent
    identity: TrackIdentity | None
    event_id: str
    frame: EventFrame | None = None


@dataclass(frozen=True)
class EventUpdated:
    """The first answer for the track of an event raised without one (docs/EVENTS.md)."""

    event_id: str
    camera: str
    track_id: int
    identity: TrackIdentity


@dataclass(frozen=True)
class CameraStateChanged:
    """A camera entered another state (:class:`vcascade.edge.capture.state.Transition`)."""

    camera: str
    step: Transition


WayBackEvent = Union[Answered, Dropped, Tracked, EventRaised, EventUpdated, CameraStateChanged]
"""Everything the way back carries."""


class EventFollowUps(Protocol):
    """The event updates' side of the way back (:class:`vcascade.edge.analytics.events.EventUpdates`)."""

    def follow_ups(self, event: WayBackEvent) -> list[EventUpdated]: ...


class HistoryStore(Protocol):
    """A store of the way back's events for later queries (:class:`vcascade.edge.history.writer.HistoryWriter`);
    ``keep`` must not block and may be called from any thread."""

    def keep(self, event: WayBackEvent) -> None: ...


class PreviewSubscriber(Protocol):
    """The preview's side of the way back (:class:`vcascade.edge.preview.hub.PreviewHub`)."""

    def take(self, event: WayBackEvent) -> None: ...


class LineWriter(Protocol):
    """Formats an event into its line and writes it to the sinks (:class:`vcascade.edge.sinks.lines.OutputLines`)."""

    def write(self, event: WayBackEvent) -> None: ...


class WayBack:
    """Delivers each event to the edge's consumers in the order of the module docstring.

    Args:
        lines: the output lines' writer (last).
        identities: the edge's identity cache (None: not kept, e.g. a load generator).
        updates: the event updates (None: no events on this edge's way back).
        preview: the preview hub (None: no previews).
        history: the history store (None: nothing kept).

    Thread: :meth:`deliver` on the link thread only (the order of the events is the order of the calls).
    """

    def __init__(
        self, lines: LineWriter, identities: IdentityCache | None = None, updates: EventFollowUps | None = None,
        preview: PreviewSubscriber | None = None, history: HistoryStore | None = None,
    ) -> None:
        self.lines, self.identities, self.updates = lines, identities, updates
        self.preview, self.history = preview, history

    def deliver(self, event: WayBackEvent) -> None:
        """Hand ``event`` to each consumer in order, then the event updates it caused. A consumer that raises is
        logged and the others still get the event (a bug in one must not stop the books or the lines)."""
        if self.identities is not None and isinstance(event, Answered):
            _guard(self.identities.remember, event.roi, event.result.output)
        follow = (_guard(self.updates.follow_ups, event) or []) if self.updates is not None else []
        if self.history is not None:
            _guard(self.history.keep, event)
        if self.preview is not None:
            _guard(self.preview.take, event)
        _guard(self.lines.write, event)
        for update in follow:
            self.deliver(update)

    def camera_state(self, camera: str, step: Transition) -> None:
        """A camera's state change is kept and becomes a line at once (any thread: only the history and the
        output lines take it)."""
        event = CameraStateChanged(camera, step)
        if self.history is not None:
            _guard(self.history.keep, event)
        _guard(self.lines.write, event)


def _guard(call, *args):
    try:
        return call(*args)
    except Exception:
        log.exception("way back: %s failed", getattr(call, "__qualname__", call))
        return None


__all__ = [
    "Answered", "CameraStateChanged", "Dropped", "EventRaised", "EventUpdated", "Tracked", "WayBack", "WayBackEvent",
]

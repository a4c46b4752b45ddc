"""Prometheus metrics of the edge's analytics (``vcascade_edge_*``, label ``edge`` on every series): counts per
line, direction and class, visits per zone, occupancy, and event records emitted.

Declared once per process like :mod:`vcascade.edge.metrics`; :class:`AnalyticsTelemetry` binds them to one edge
and camera. Label values are bounded: line and zone names come from the config, classes from the detector's
class names, ``type`` from :data:`EVENT_RECORD_TYPES`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge

from vcascade.edge.analytics.counting import EVENT_TYPES

EVENT_RECORD_TYPES = (*EVENT_TYPES, "event_update")
"""``type`` label values of ``vcascade_edge_events_total``: the event types and the updates of events."""

LINE_CROSSINGS = Counter(
    "vcascade_edge_line_crossings_total",
    "Tracks that crossed a counting line, by line, direction (in, out) and class.",
    ["edge", "camera", "line", "direction", "class"],
)
ZONE_VISITS = Counter(
    "vcascade_edge_zone_visits_total",
    "Zone events by zone, event (enter, exit, dwell) and class the track entered with.",
    ["edge", "camera", "zone", "event", "class"],
)
ZONE_OCCUPANCY = Gauge(
    "vcascade_edge_zone_occupancy", "Tracks inside a zone now, by class they entered with.", ["edge", "camera", "zone", "class"]
)
EVENTS = Counter(
    "vcascade_edge_events_total",
    "Event records handed to the sinks, by type (line_cross, zone_enter, zone_exit, zone_dwell, event_update).",
    ["edge", "camera", "type"],
)


class AnalyticsTelemetry:
    """The analytics metrics of one camera of one edge; each series' child is looked up once (the registry's
    ``labels()`` costs microseconds per call, which a busy frame would pay per event)."""

    def __init__(self, edge: str, camera: str) -> None:
        self.edge, self.camera = edge, camera
        self._children: dict[tuple[str, ...], Any] = {}
        self._occupied: set[tuple[str, str]] = set()

    def _child(self, family: Counter | Gauge, *labels: str) -> Any:
        key = (family._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(self.edge, self.camera, *labels)
        return child

    def line_crossed(self, line: str, direction: str, class_name: str) -> None:
        self._child(LINE_CROSSINGS, line, direction, class_name).inc()

    def zone_event(self, zone: str, event: str, class_name: str) -> None:
        """``event``: enter, exit or dwell."""
        self._child(ZONE_VISITS, zone, event, class_name).inc()

    def event_emitted(self, kind: str) -> None:
        """``kind``: one of :data:`EVENT_RECORD_TYPES`."""
        self._child(EVENTS, kind).inc()

    def occupancy(self, counts: dict[tuple[str, str], int]) -> None:
        """Set each (zone, class) gauge; pairs that emptied since the last call go back to 0."""
        for zone, class_name in self._occupied - counts.keys():
            self._child(ZONE_OCCUPANCY, zone, class_name).set(0)
        for (zone, class_name), count in counts.items():
            self._child(ZONE_OCCUPANCY, zone, class_name).set(count)
        self._occupied = set(counts)

"""Analytics at the edge: counting lines, zones, occupancy and dwell from each camera's tracks, as events for the
sinks (docs/EVENTS.md).

:mod:`~vcascade.edge.analytics.geometry` (pure geometry) -> :mod:`~vcascade.edge.analytics.counting` (pure state
machine per camera) -> :mod:`~vcascade.edge.analytics.camera` (the edge's step: events, metrics) ->
:mod:`~vcascade.edge.analytics.events` (their updates when recognition arrives later); the lines are written by
:mod:`vcascade.edge.sinks.lines`.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "CameraAnalytics": ".camera",
    "AnalyticsEvent": ".counting",
    "TrackAnalytics": ".counting",
    "EventUpdates": ".events",
    "AnalyticsTelemetry": ".metrics",
})

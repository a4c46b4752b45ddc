"""One camera's analytics step on the edge: after tracking, the frame's tracks move the lines' and zones' state
(:mod:`vcascade.edge.analytics.counting`), and each event goes down the way back with the identity its
track has now (:class:`vcascade.edge.way_back.EventRaised`) (:mod:`vcascade.edge.analytics.events`), counted in the metrics (:mod:`vcascade.edge.analytics.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from vcascade.core.detections import Detections
from vcascade.core.schema.analytics import AnalyticsConfig
from vcascade.edge.analytics.counting import AnalyticsEvent, TrackAnalytics
from vcascade.edge.analytics.events import new_event_id
from vcascade.edge.analytics.metrics import AnalyticsTelemetry
from vcascade.edge.capture.frames import Frame
from vcascade.edge.history.picture import event_frame
from vcascade.edge.privacy.redaction import RedactedFrame
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.way_back import EventRaised

NO_DETECTIONS = Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))

ZONE_EVENT_LABELS = {"zone_enter": "enter", "zone_exit": "exit", "zone_dwell": "dwell"}
"""``event`` label of ``vcascade_edge_zone_visits_total`` per event type."""


class CameraAnalytics:
    """Lines and zones of one camera, run on the edge's loop thread after its tracker.

    Args:
        edge, camera: names (metric labels; ``camera`` of the records).
        cfg: the camera's ``analytics``.
        class_names: the detector's class names.
        identities: the edge's identity cache (the identity a track has when its event fires).
        publish: hands an event to the way back (:meth:`BrokerLink.publish`).
        frame_width_px: width of each event's picture for the history's evidence
            (:func:`vcascade.edge.history.picture.event_frame`; None: no pictures).
        jpeg_quality: the pictures' JPEG quality (1..100).

    Raises:
        ValueError: a line's or zone's ``classes`` names a class the detector does not have (its names came from
            a file, which loading the config does not read); the edge does not start.
    """

    def __init__(
        self, edge: str, camera: str, cfg: AnalyticsConfig, class_names: Sequence[str], identities: IdentityCache,
        publish: Callable[[EventRaised], None], frame_width_px: int | None = None, jpeg_quality: int = 80,
    ) -> None:
        self.camera = camera
        self.cfg = cfg
        self.frame_width_px, self.jpeg_quality = frame_width_px, jpeg_quality
        self.counting = TrackAnalytics(cfg, class_names)
        self.telemetry = AnalyticsTelemetry(edge, camera)
        self._identities = identities
        self._publish = publish

    def process(self, frame: Frame, tracked: Detections, alive: set[int], leaving: RedactedFrame | None = None) -> int:
        """Move the state with one frame's tracked detections and publish its events; returns how many.

        ``leaving``: the frame as it may leave the edge (:meth:`vcascade.edge.privacy.redaction.CameraRedaction.redact`),
        from which each event's picture is made when pictures are on (None: no picture).
        Call it before the identity cache forgets the tracks the tracker dropped, so that a lost track's zone exit
        still carries its identity."""
        events = self.counting.update(tracked, frame.stream_ts_ms, frame.capture_unix_ms, frame.image.shape[:2], alive)
        self._publish_all(events, leaving, tracked)
        return len(events)

    def close(self) -> int:
        """The camera was removed: its tracks are gone, so each track inside a zone exits it (``track_lost``, at
        its last stream time) and the zones' occupancy gauges go back to 0. Returns the number of events."""
        events = self.counting.update(NO_DETECTIONS, 0.0, 0.0, (1, 1), set())
        self._publish_all(events)
        self.telemetry.occupancy({})
        return len(events)

    def _publish_all(
        self, events: list[AnalyticsEvent], frame: RedactedFrame | None = None, tracked: Detections | None = None
    ) -> None:
        for event in events:
            identity = self._identities.get(self.camera, event.track_id)
            picture = None
            if self.frame_width_px is not None and frame is not None and tracked is not None:
                picture = event_frame(frame, tracked, event, self.cfg, self.frame_width_px, self.jpeg_quality)
            self._publish(EventRaised(self.camera, event, identity, new_event_id(), picture))
            self.telemetry.event_emitted(event.type)
            if event.type == "line_cross":
                self.telemetry.line_crossed(event.place, str(event.direction), event.class_name)
            else:
                self.telemetry.zone_event(event.place, ZONE_EVENT_LABELS[event.type], event.class_name)
        if any(event.type in ("zone_enter", "zone_exit") for event in events):
            self.telemetry.occupancy(self.counting.occupancy())

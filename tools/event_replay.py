"""Events recomputed offline from an edge's JSONL output lines, to check the live events against the tracks
(scripts/demo_events.sh, through tools/demo_events.py), and counts of events by line or zone, direction and class.

Every detection of a confirmed track gets exactly one output line when the ROI policy filters nothing (no
``classes``, ``min_score`` or ``max_size_px``, ``min_size_px: 1``, a route for every class): a result or drop line
if it was sent, a ``tracked`` line if not. Replaying those lines frame by frame through the same
:class:`~vcascade.edge.analytics.counting.TrackAnalytics` gives the crossings, entries, dwells and exits the edge
emitted. What a replay cannot know is when the tracker dropped a track, so exits of lost tracks
(``track_lost``) are not replayed; ByteTrack never reuses an id, so the rest is unaffected.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vcascade.core.detections import Detections
from vcascade.core.schema.analytics import AnalyticsConfig
from vcascade.edge.analytics.counting import AnalyticsEvent, TrackAnalytics

DETECTION_STATUSES = ("ok", "dropped", "tracked")
"""``status`` of the output lines that describe one detection each."""

CountKey = tuple[str, str, str, str]
"""(event type, line or zone name, direction or "", class)."""


def replay_lines(
    lines: Iterable[dict[str, Any]], camera: str, cfg: AnalyticsConfig, class_names: Sequence[str],
    frame_hw: tuple[int, int],
) -> list[AnalyticsEvent]:
    """The events of ``camera`` recomputed from its output lines (module docstring).

    Args:
        lines: output records of the edge (JSONL lines, any order); other cameras' lines, records of other kinds
            and detections without a track (``track_id`` -1) are skipped.
        camera: the camera whose lines are replayed.
        cfg: its ``analytics``.
        class_names: the detector's class names (class id -> name).
        frame_hw: (height, width) of its upright frames, px.

    Returns:
        The events in frame order (no exits of lost tracks).

    Raises:
        KeyError, TypeError, ValueError: a detection line lacks ``frame_seq``, ``stream_ts_ms``, ``capture_unix_ms``,
            ``bbox_xyxy``, ``class_id`` or ``track_id``, or holds values of the wrong type.
    """
    frames: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        if line.get("camera") == camera and line.get("status") in DETECTION_STATUSES and line["track_id"] >= 0:
            frames[int(line["frame_seq"])].append(line)
    analytics = TrackAnalytics(cfg, class_names)
    seen: set[int] = set()
    events: list[AnalyticsEvent] = []
    for seq in sorted(frames):
        rows = frames[seq]
        seen.update(int(row["track_id"]) for row in rows)
        detections = Detections(
            np.array([row["bbox_xyxy"] for row in rows], np.float32).reshape(-1, 4),
            np.array([row["score"] for row in rows], np.float32),
            np.array([row["class_id"] for row in rows], np.int64),
            np.array([row["track_id"] for row in rows], np.int64),
        )
        first = rows[0]
        events += analytics.update(detections, first["stream_ts_ms"], first["capture_unix_ms"], frame_hw, seen)
    return events


def count_events(events: Iterable[AnalyticsEvent | dict[str, Any]]) -> Counter[CountKey]:
    """Events counted by (type, line or zone, direction, class): live records (``kind: event``) or replayed
    :class:`AnalyticsEvent`\\ s; exits of lost tracks are left out of both, as :func:`replay_lines` cannot see them."""
    counts: Counter[CountKey] = Counter()
    for event in events:
        if isinstance(event, AnalyticsEvent):
            key = (event.type, event.place, event.direction or "", event.class_name)
            lost = event.track_lost
        else:
            key = (event["type"], event.get("line") or event.get("zone"), event.get("direction") or "", event["class"])
            lost = bool(event.get("track_lost"))
        if not lost:
            counts[key] += 1
    return counts

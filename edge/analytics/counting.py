"""Line crossings, zone visits and dwell from one camera's tracks: a pure state machine (no clock, no I/O, no
sockets), fed one frame at a time with the tracked detections, the frame's stream time (PTS) and the tracks the
tracker still keeps.

Rules (docs/EVENTS.md):

* **Anchor**: each detection is one point of its box (``anchor``, bottom-centre by default), in pixels of the
  upright frame.
* **Sides of a line, with hysteresis**: a track is on a line's ``in`` or ``out`` side once its anchor is more than
  ``hysteresis_px`` from the line; inside that band it keeps the side it had. A crossing is a change of side, so a
  box jittering on the line changes nothing, and one that moves across counts once. A track seen first (or only)
  inside the band has no side yet and counts nothing until it leaves the band.
* **Within the segment**: a change of side counts only when the straight path from the track's last position on
  the old side to its position on the new side meets the line between its two points; walking round the end of a
  line changes the side without counting.
* **Zones, with hysteresis**: a track enters a zone when its anchor is inside the polygon and at least
  ``hysteresis_px`` from its edges, and exits when it is outside by as much. ``zone_dwell`` fires once per visit
  when the stream time since the entry reaches ``dwell_s``. Exit and dwell keep the class the track entered with.
* **Lost and found again**: state is kept per track id for as long as the tracker keeps the track (ByteTrack's
  lost buffer), so a track lost and found again on the same side counts nothing, and one found on the other side
  counts the one crossing it made unseen. When the tracker drops a track, its state is forgotten; a track inside a
  zone then gets a ``zone_exit`` with ``track_lost`` at its last stream time, so occupancy never holds ghosts.
* **Time** is the frame's PTS (``stream_ts_ms``), never a frame index: dwell is right at any frame rate.
* **Classes**: a line counts a crossing when the detection's class at that frame is among its ``classes``; a zone
  admits a track when its class at entry is among the zone's ``classes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vcascade.core.detections import Detections
from vcascade.core.schema.analytics import AnalyticsConfig
from vcascade.edge.analytics.geometry import LineGeometry, ZoneGeometry, anchor_points, build_geometry

EVENT_TYPES = ("line_cross", "zone_enter", "zone_exit", "zone_dwell")
"""``type`` of an event."""


@dataclass(frozen=True)
class AnalyticsEvent:
    """One event of one track.

    Attributes:
        type: one of :data:`EVENT_TYPES`.
        place: the name of the line (``line_cross``) or zone (the others).
        track_id: the track (>= 0).
        class_name: the detection's class at the crossing, or the class the track entered the zone with.
        stream_ts_ms: PTS of the frame it happened in, ms (a lost track's exit: its last frame's).
        capture_unix_ms: wall-clock capture time of that frame, ms since the Unix epoch.
        direction: ``in`` or ``out`` for ``line_cross``, else None.
        dwell_s: stream seconds inside the zone, for ``zone_dwell`` and ``zone_exit``; else None.
        track_lost: ``zone_exit`` because the tracker dropped the track while it was inside.
    """

    type: str
    place: str
    track_id: int
    class_name: str
    stream_ts_ms: float
    capture_unix_ms: float
    direction: str | None = None
    dwell_s: float | None = None
    track_lost: bool = False


class TrackAnalytics:
    """The lines and zones of one camera and the state of its tracks (module docstring); one thread.

    Args:
        cfg: the camera's analytics.
        class_names: the detector's class names (class id -> name); class filters are matched against them.

    Raises:
        ValueError: a line's or zone's ``classes`` names a class not in ``class_names``.
    """

    INITIAL_SLOTS = 64

    def __init__(self, cfg: AnalyticsConfig, class_names: Sequence[str]) -> None:
        self.cfg = cfg
        self.class_names = list(class_names)
        self.line_names = [line.name for line in cfg.lines]
        self.zone_names = [zone.name for zone in cfg.zones]
        self._line_classes = _class_table([line.classes for line in cfg.lines], self.class_names, "lines")
        self._zone_classes = _class_table([zone.classes for zone in cfg.zones], self.class_names, "zones")
        self._dwell_ms = np.array([np.inf if z.dwell_s is None else z.dwell_s * 1000.0 for z in cfg.zones])
        self._any_dwell = bool(np.isfinite(self._dwell_ms).any())
        self._geometry: tuple[tuple[int, int], LineGeometry, ZoneGeometry] | None = None
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        self._allocate(self.INITIAL_SLOTS)

    # ------------------------------------------------------------ per frame

    def update(
        self, detections: Detections, stream_ts_ms: float, capture_unix_ms: float, frame_hw: tuple[int, int],
        alive: set[int],
    ) -> list[AnalyticsEvent]:
        """One frame: forget the tracks the tracker dropped, then move the tracked detections' states.

        Args:
            detections: the frame's detections after tracking; rows with ``track_id`` -1 are ignored.
            stream_ts_ms: the frame's PTS, ms (should not decrease while tracks live; the tracker restarts, and so
                drops every track, when it does).
            capture_unix_ms: the frame's wall-clock capture time, ms since the Unix epoch.
            frame_hw: (height, width) of the upright frame, px (scales normalised coordinates).
            alive: ids of the tracks the tracker still keeps (``CameraTracker.alive_ids``).

        Returns:
            The events of this frame: lost tracks' exits first, then crossings, exits, entries and dwells.
        """
        events = self._forget(alive)
        rows = np.flatnonzero(detections.track_id >= 0)
        if len(rows) == 0:
            return events
        lines, zones = self._geometry_for(frame_hw)
        track_ids = detections.track_id[rows]
        slots = np.fromiter((self._slot(int(t)) for t in track_ids), np.int64, len(rows))
        classes = np.asarray(detections.class_id[rows], np.int64)
        points = anchor_points(detections.xyxy[rows], self.cfg.anchor)
        frame = (stream_ts_ms, capture_unix_ms)
        if self.line_names:
            events += self._lines(lines, slots, track_ids, classes, points, frame)
        if self.zone_names:
            events += self._zones(zones, slots, track_ids, classes, points, frame)
        self._last_ms[slots] = stream_ts_ms
        self._last_capture_ms[slots] = capture_unix_ms
        return events

    def occupancy(self) -> dict[tuple[str, str], int]:
        """Tracks inside each zone now, by (zone, class at entry); only pairs with at least one track."""
        slots = np.fromiter(self._slot_of.values(), np.int64, len(self._slot_of))
        inside = self._inside[slots]
        counts: dict[tuple[str, str], int] = {}
        for row, z in zip(*np.nonzero(inside)):
            key = (self.zone_names[z], self._class_name(int(self._entered_class[slots[row], z])))
            counts[key] = counts.get(key, 0) + 1
        return counts

    @property
    def tracks_followed(self) -> int:
        """Tracks whose state is kept."""
        return len(self._slot_of)

    # ------------------------------------------------------------ lines

    def _lines(
        self, lines: LineGeometry, slots: np.ndarray, track_ids: np.ndarray, classes: np.ndarray,
        points: np.ndarray, frame: tuple[float, float],
    ) -> list[AnalyticsEvent]:
        h = self.cfg.hysteresis_px
        distance = lines.signed_distance(points)
        side = (distance > h).astype(np.int8) - (distance < -h)  # (n, L): +1 in, -1 out, 0 inside the band
        previous = self._side[slots]
        flipped = side * previous < 0  # both clear, and opposite
        events = []
        if flipped.any():
            row, line = np.nonzero(flipped)
            within = lines.crossing_within(line, self._last_point[slots[row], line], points[row])
            counted = within & self._line_classes[line, _class_column(classes[row], len(self.class_names))]
            for r, k in zip(row[counted], line[counted]):
                direction = "in" if side[r, k] > 0 else "out"
                events.append(self._event("line_cross", self.line_names[k], track_ids[r], classes[r], frame, direction))
        clear = side != 0
        self._side[slots] = np.where(clear, side, previous)
        self._last_point[slots] = np.where(clear[:, :, None], points[:, None, :], self._last_point[slots])
        return events

    # ------------------------------------------------------------ zones

    def _zones(
        self, zones: ZoneGeometry, slots: np.ndarray, track_ids: np.ndarray, classes: np.ndarray,
        points: np.ndarray, frame: tuple[float, float],
    ) -> list[AnalyticsEvent]:
        ts_ms = frame[0]
        in_polygon = zones.inside(points)
        was = self._inside[slots]
        changing = in_polygon != was
        if changing.any():  # the distance to the edges only matters where the state may change
            rows = np.flatnonzero(changing.any(axis=1))
            clear = np.zeros_like(changing)
            clear[rows] = zones.boundary_distance(points[rows]) >= self.cfg.hysteresis_px
            admitted = self._zone_classes[:, _class_column(classes, len(self.class_names))].T
            entering = changing & clear & in_polygon & admitted
            leaving = changing & clear & was
        else:
            entering = leaving = changing
        events = []
        for r, z in zip(*np.nonzero(leaving)):
            slot = slots[r]
            dwell_s = (ts_ms - self._enter_ms[slot, z]) / 1000.0
            entered = self._entered_class[slot, z]
            events.append(self._event("zone_exit", self.zone_names[z], track_ids[r], entered, frame, dwell_s=dwell_s))
            self._inside[slot, z] = False
        for r, z in zip(*np.nonzero(entering)):
            slot = slots[r]
            self._inside[slot, z], self._enter_ms[slot, z] = True, ts_ms
            self._entered_class[slot, z], self._dwell_sent[slot, z] = classes[r], False
            events.append(self._event("zone_enter", self.zone_names[z], track_ids[r], classes[r], frame))
        if self._any_dwell:
            events += self._dwells(slots, track_ids, frame)
        return events

    def _dwells(self, slots: np.ndarray, track_ids: np.ndarray, frame: tuple[float, float]) -> list[AnalyticsEvent]:
        """``zone_dwell`` of the tracks inside a zone for its ``dwell_s`` since their entry (once per visit)."""
        ts_ms = frame[0]
        events = []
        due = self._inside[slots] & ~self._dwell_sent[slots] & (ts_ms - self._enter_ms[slots] >= self._dwell_ms[None, :])
        for r, z in zip(*np.nonzero(due)):
            slot = slots[r]
            self._dwell_sent[slot, z] = True
            dwell_s = (ts_ms - self._enter_ms[slot, z]) / 1000.0
            entered = self._entered_class[slot, z]
            events.append(self._event("zone_dwell", self.zone_names[z], track_ids[r], entered, frame, dwell_s=dwell_s))
        return events

    # ------------------------------------------------------------ track slots

    def _forget(self, alive: set[int]) -> list[AnalyticsEvent]:
        """Release the tracks the tracker dropped; a lost track inside a zone exits it at its last stream time."""
        events = []
        for track_id in sorted(self._slot_of.keys() - alive):
            slot = self._slot_of.pop(track_id)
            frame = (float(self._last_ms[slot]), float(self._last_capture_ms[slot]))
            for z in np.flatnonzero(self._inside[slot]):
                dwell_s = (frame[0] - self._enter_ms[slot, z]) / 1000.0
                events.append(self._event(
                    "zone_exit", self.zone_names[z], track_id, self._entered_class[slot, z], frame,
                    dwell_s=dwell_s, track_lost=True,
                ))
            self._free.append(slot)
        return events

    def _slot(self, track_id: int) -> int:
        """The state row of a track, a fresh one (no side, outside every zone) for a track seen first."""
        slot = self._slot_of.get(track_id)
        if slot is not None:
            return slot
        if not self._free:
            self._allocate(2 * len(self._side))
        slot = self._free.pop()
        self._side[slot] = 0
        self._inside[slot] = False
        self._dwell_sent[slot] = False
        self._slot_of[track_id] = slot
        return slot

    def _allocate(self, capacity: int) -> None:
        """Grow the state arrays to ``capacity`` rows (S); rows beyond the old size become free."""
        old = len(self._side) if hasattr(self, "_side") else 0
        n_lines, n_zones = len(self.line_names), len(self.zone_names)

        def grow(name: str, shape: tuple[int, ...], dtype: type, fill: float) -> None:
            array = np.full((capacity, *shape), fill, dtype)
            if old:
                array[:old] = getattr(self, name)
            setattr(self, name, array)

        grow("_side", (n_lines,), np.int8, 0)  # (S, L): +1 in, -1 out, 0 no side yet
        grow("_last_point", (n_lines, 2), np.float64, 0.0)  # (S, L, 2): last anchor clear of the band, px
        grow("_inside", (n_zones,), bool, False)  # (S, Z)
        grow("_enter_ms", (n_zones,), np.float64, 0.0)  # (S, Z): PTS of the entry, ms
        grow("_entered_class", (n_zones,), np.int64, -1)  # (S, Z): class id at the entry
        grow("_dwell_sent", (n_zones,), bool, False)  # (S, Z)
        grow("_last_ms", (), np.float64, 0.0)  # (S,): PTS of the track's last detection, ms
        grow("_last_capture_ms", (), np.float64, 0.0)  # (S,)
        self._free.extend(range(capacity - 1, old - 1, -1))

    # ------------------------------------------------------------ helpers

    def _geometry_for(self, frame_hw: tuple[int, int]) -> tuple[LineGeometry, ZoneGeometry]:
        """Lines and zones in pixels of this frame size (rebuilt when the size changes, e.g. after a reconnect)."""
        hw = (int(frame_hw[0]), int(frame_hw[1]))
        if self._geometry is None or self._geometry[0] != hw:
            self._geometry = (hw, *build_geometry(self.cfg, hw))
        return self._geometry[1], self._geometry[2]

    def _class_name(self, class_id: int) -> str:
        return self.class_names[class_id] if 0 <= class_id < len(self.class_names) else str(class_id)

    def _event(
        self, kind: str, place: str, track_id: int | np.integer, class_id: int | np.integer,
        frame: tuple[float, float], direction: str | None = None, dwell_s: float | None = None,
        track_lost: bool = False,
    ) -> AnalyticsEvent:
        return AnalyticsEvent(
            kind, place, int(track_id), self._class_name(int(class_id)), float(frame[0]), float(frame[1]),
            direction, None if dwell_s is None else round(float(dwell_s), 3), track_lost,
        )


def _class_table(filters: list[list[str] | None], class_names: list[str], kind: str = "") -> np.ndarray:
    """(K, C + 1) bool: item k counts class id c; the last column is for ids outside the detector's names
    (counted only by items without a class filter).

    Raises:
        ValueError: a filter names a class the detector does not have (possible when its names come from a
            file, which the config check cannot read).
    """
    table = np.zeros((len(filters), len(class_names) + 1), bool)
    for k, classes in enumerate(filters):
        if classes is None:
            table[k] = True
            continue
        unknown = sorted(set(classes) - set(class_names))
        if unknown:
            raise ValueError(f"analytics {kind}[{k}].classes: {unknown} not among the detector's class names")
        table[k, [i for i, name in enumerate(class_names) if name in classes]] = True
    return table


def _class_column(class_ids: np.ndarray, n_classes: int) -> np.ndarray:
    """Column of :func:`_class_table` for each class id."""
    return np.where((class_ids >= 0) & (class_ids < n_classes), class_ids, n_classes)

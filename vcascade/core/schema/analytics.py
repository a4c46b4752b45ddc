"""Per-camera analytics of the deployment file: counting lines and zones turned into events at the edge
(edge/analytics/, docs/EVENTS.md).

Coordinates are those of the displayed (upright) frame: pixels, or fractions 0..1 of its width and height with
``coordinates: normalized``. Geometry problems are reported on the key they are about (:func:`key_problem`): a
line whose two points coincide, a polygon with fewer than 3 points or whose edges cross, a normalised coordinate
outside 0..1, a name used twice.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from vcascade.core.schema.base import ConfigModel, Name, key_problem

COORDINATE_LIMIT = 100_000.0
"""Largest magnitude of a coordinate, px: ~6x the width of a 16K frame (15,360 px), so any line or zone of a real
frame fits, with room for points placed outside it, while sums and products of coordinates stay exact enough in
float64 (1e308 overflowed to inf in them, and the events silently stopped)."""

MAX_CORNERS = 1024
"""Corners of one camera's zones plus two per line, at most. Bounds what the edge computes per frame (every anchor
against every edge) and what ``check`` validates
(tools/bench_geometry.py measures both for the largest geometry allowed)."""

Coordinate = Annotated[float, Field(allow_inf_nan=False, ge=-COORDINATE_LIMIT, le=COORDINATE_LIMIT)]
"""One coordinate: a finite number within +-:data:`COORDINATE_LIMIT`."""

Point = tuple[Coordinate, Coordinate]
"""(x, y): pixels of the upright frame, x to the right and y down, or fractions of its width and height; finite,
within +-:data:`COORDINATE_LIMIT`."""

ANCHORS = ("bottom_center", "center", "top_center", "bottom_left", "bottom_right")
"""The point of a detection box that stands for the object: ``bottom_center`` (where it touches the ground) by
default."""


class CountingLineConfig(ConfigModel):
    """A counting line: each crossing of the segment by a track's anchor counts once, `in` or `out`.

    Hysteresis, lost tracks and the segment's ends: :mod:`vcascade.edge.analytics.counting`."""

    name: Name = Field(description="Name of the line (metric label, `line` of its events).")
    points: tuple[Point, Point] = Field(description="Start and end of the segment, [[x, y], [x, y]].")
    in_side: Literal["left", "right"] = Field(
        "left",
        description="The side a track enters to be counted `in`, seen on the displayed frame looking from the first "
        "point towards the second (the other side counts `out`).",
    )
    classes: list[str] | None = Field(None, min_length=1, description="Detector class names counted (None: all).")

    @model_validator(mode="after")
    def _two_points(self) -> CountingLineConfig:
        """The segment has a length."""
        if self.points[0] == self.points[1]:
            raise key_problem("points", [list(p) for p in self.points], "the two points are the same: a line needs a length")
        return self


class ZoneConfig(ConfigModel):
    """A zone: a polygon with enter and exit events, live occupancy and, with `dwell_s`, dwell events.

    One ``zone_dwell`` event per visit that lasts ``dwell_s`` (:mod:`vcascade.edge.analytics.counting`)."""

    name: Name = Field(description="Name of the zone (metric label, `zone` of its events).")
    polygon: list[Point] = Field(
        min_length=3, max_length=256, description="Corners in order, [[x, y], ...]; closed implicitly; edges must not cross."
    )
    classes: list[str] | None = Field(None, min_length=1, description="Detector class names counted (None: all).")
    dwell_s: float | None = Field(
        None, gt=0, le=86_400,
        description="Emit a `zone_dwell` event when a track has been inside this many stream seconds (None: never).",
    )

    @model_validator(mode="after")
    def _simple_polygon(self) -> ZoneConfig:
        """The polygon has an area and its edges meet only at shared corners."""
        crossing = first_crossing(self.polygon)
        if crossing is not None:
            i, j = crossing
            raise key_problem(
                "polygon", [list(p) for p in self.polygon],
                f"edges {i} and {j} cross or overlap (a zone must be a simple polygon: list the corners in order)",
            )
        return self


class AnalyticsConfig(ConfigModel):
    """What a camera's tracks are turned into at the edge: counts, occupancy and events (docs/EVENTS.md)."""

    coordinates: Literal["pixels", "normalized"] = Field(
        "pixels", description="Units of the points: pixels of the upright frame, or fractions 0..1 of its size."
    )
    anchor: Literal["bottom_center", "center", "top_center", "bottom_left", "bottom_right"] = Field(
        "bottom_center", description="The point of a box tested against lines and zones."
    )
    hysteresis_px: float = Field(
        8.0, ge=0, le=1000,
        description="An anchor this close to a line or a zone's edge, px, keeps its previous side, so a box "
        "jittering on the line counts once.",
    )
    lines: list[CountingLineConfig] = Field(default_factory=list, max_length=256, description="Counting lines.")
    zones: list[ZoneConfig] = Field(default_factory=list, max_length=256, description="Zones.")

    @model_validator(mode="after")
    def _names_and_units(self) -> AnalyticsConfig:
        """Names are unique per kind; normalised coordinates lie within 0..1."""
        for kind, items in (("lines", self.lines), ("zones", self.zones)):
            names = [item.name for item in items]
            for i, name in enumerate(names):
                if name in names[:i]:
                    raise key_problem(f"{kind}[{i}].name", name, "used twice: each line and zone needs its own name")
        corners = sum(2 for _ in self.lines) + sum(len(zone.polygon) for zone in self.zones)
        if corners > MAX_CORNERS:
            raise key_problem("zones", f"{corners} corners", f"lines (2 points each) and zones have at most "
                              f"{MAX_CORNERS} corners per camera: what every frame is checked against")
        if self.coordinates == "normalized":
            for key, points in self._point_lists():
                for point in points:
                    if not all(0.0 <= v <= 1.0 for v in point):
                        raise key_problem(
                            key, list(point), "outside 0..1 (`coordinates: normalized`; use pixels otherwise)"
                        )
        return self

    def _point_lists(self) -> list[tuple[str, tuple[Point, ...] | list[Point]]]:
        return [
            *((f"lines[{i}].points", line.points) for i, line in enumerate(self.lines)),
            *((f"zones[{i}].polygon", zone.polygon) for i, zone in enumerate(self.zones)),
        ]


def first_crossing(polygon: list[Point]) -> tuple[int, int] | None:
    """The first pair of edges (i, j) of a closed polygon that intersect other than at the corner two neighbours
    share, or None for a simple polygon. Edge i joins corner i to corner i+1 (the last to the first).

    A polygon of zero area (all corners on one line) has overlapping edges and is reported too. O(n^2) in the
    corners (at most 256), once at load time, as array operations over all pairs of edges at once (the scalar
    version took 0.25 s per 256-corner zone). Orientation test: Cormen et al., *Introduction to Algorithms*,
    section 33.1 (segment intersection, collinear cases included)."""
    n = len(polygon)
    edges = [(polygon[i], polygon[(i + 1) % n]) for i in range(n)]
    meet = _all_segments_meet(np.array(polygon, np.float64))  # (n, n): edge i and edge j share a point
    i_index, j_index = np.triu_indices(n, 1)
    adjacent = (j_index == i_index + 1) | ((i_index == 0) & (j_index == n - 1))
    found = meet[i_index, j_index] & ~adjacent
    for k in np.flatnonzero(adjacent):  # n of them: neighbours share a corner, so only folding back counts
        i, j = int(i_index[k]), int(j_index[k])
        found[k] = _fold_back(edges[i], edges[j], shared_end_of_first=(j == i + 1))
    hits = np.flatnonzero(found)
    return None if not len(hits) else (int(i_index[hits[0]]), int(j_index[hits[0]]))  # row-major: the first pair


def _all_segments_meet(corners: np.ndarray) -> np.ndarray:
    """(n, n) bool: closed edges i and j of the closed polygon ``corners`` (n, 2) share a point (they cross
    properly, or an end of one lies on the other), for every pair at once."""
    a, b = corners, np.roll(corners, -1, axis=0)

    def orientation(p: np.ndarray, q: np.ndarray, r: np.ndarray) -> np.ndarray:
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])

    def on_segment(p: np.ndarray, q: np.ndarray, r: np.ndarray) -> np.ndarray:
        return ((np.minimum(p[..., 0], q[..., 0]) <= r[..., 0]) & (r[..., 0] <= np.maximum(p[..., 0], q[..., 0]))
                & (np.minimum(p[..., 1], q[..., 1]) <= r[..., 1]) & (r[..., 1] <= np.maximum(p[..., 1], q[..., 1])))

    ai, bi = a[:, None, :], b[:, None, :]  # edge i along axis 0
    cj, dj = a[None, :, :], b[None, :, :]  # edge j along axis 1
    d1, d2 = orientation(cj, dj, ai), orientation(cj, dj, bi)
    d3, d4 = orientation(ai, bi, cj), orientation(ai, bi, dj)
    proper = (((d1 > 0) & (d2 < 0)) | ((d1 < 0) & (d2 > 0))) & (((d3 > 0) & (d4 < 0)) | ((d3 < 0) & (d4 > 0)))
    return proper | (
        ((d1 == 0) & on_segment(cj, dj, ai)) | ((d2 == 0) & on_segment(cj, dj, bi))
        | ((d3 == 0) & on_segment(ai, bi, cj)) | ((d4 == 0) & on_segment(ai, bi, dj))
    )


def _orientation(a: Point, b: Point, c: Point) -> float:
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def _on_segment(a: Point, b: Point, p: Point) -> bool:
    return min(a[0], b[0]) <= p[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= p[1] <= max(a[1], b[1])


def _fold_back(first: tuple[Point, Point], second: tuple[Point, Point], shared_end_of_first: bool) -> bool:
    """Whether two neighbouring edges overlap beyond their shared corner (collinear and turning back) or one of
    them has no length (a corner listed twice)."""
    if first[0] == first[1] or second[0] == second[1]:
        return True
    shared, p, q = (first[1], first[0], second[1]) if shared_end_of_first else (first[0], first[1], second[0])
    if _orientation(shared, p, q) != 0:
        return False
    return (p[0] - shared[0]) * (q[0] - shared[0]) + (p[1] - shared[1]) * (q[1] - shared[1]) > 0

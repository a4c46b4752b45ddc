"""Geometry of a camera's counting lines and zones in pixels of the upright frame, vectorised over detections
(pure numpy: no clock, no I/O).

Image coordinates: x to the right, y down. Every function takes the anchors of one frame's detections as an
(n, 2) float64 array and returns one value per (detection, line) or (detection, zone), so one frame costs a few
array operations whatever the number of lines and zones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vcascade.core.schema.analytics import AnalyticsConfig


def anchor_points(xyxy: np.ndarray, anchor: str) -> np.ndarray:
    """The anchor point of each box.

    Args:
        xyxy: (n, 4) boxes x1, y1, x2, y2 in pixels (any float or int dtype).
        anchor: one of :data:`vcascade.core.schema.analytics.ANCHORS`.

    Returns:
        (n, 2) float64 x, y in pixels.

    Raises:
        ValueError: an unknown anchor.
    """
    boxes = np.asarray(xyxy, np.float64).reshape(-1, 4)
    if anchor not in ANCHOR_WEIGHTS:
        raise ValueError(f"unknown anchor {anchor!r}: expected one of {sorted(ANCHOR_WEIGHTS)}")
    return boxes @ ANCHOR_WEIGHTS[anchor]


ANCHOR_WEIGHTS = {
    name: np.array(weights, np.float64).T
    for name, weights in {
        "bottom_center": ((0.5, 0, 0.5, 0), (0, 0, 0, 1)),
        "center": ((0.5, 0, 0.5, 0), (0, 0.5, 0, 0.5)),
        "top_center": ((0.5, 0, 0.5, 0), (0, 1, 0, 0)),
        "bottom_left": ((1, 0, 0, 0), (0, 0, 0, 1)),
        "bottom_right": ((0, 0, 1, 0), (0, 0, 0, 1)),
    }.items()
}
"""(4, 2) weights that turn a box (x1, y1, x2, y2) into its anchor (x, y) (one matrix product for all boxes)."""


@dataclass(frozen=True)
class LineGeometry:
    """L counting lines as arrays.

    Attributes:
        start: (L, 2) float64 first points, px.
        direction: (L, 2) float64 end minus start, px.
        length: (L,) float64 segment lengths, px (> 0).
        in_sign: (L,) float64 +1 when the ``in`` side is the right of start->end on the displayed frame, -1 for the
            left, so that :meth:`signed_distance` is positive on the ``in`` side.
    """

    start: np.ndarray
    direction: np.ndarray
    length: np.ndarray
    in_sign: np.ndarray

    def signed_distance(self, points: np.ndarray) -> np.ndarray:
        """(n, L) float64 distance of each point from each line's infinite extension, px: > 0 on the ``in`` side.

        The 2-D cross product (direction x (point - start)) is negative on the left of start->end when y points
        down, so the ``in`` sign flips it for lines whose ``in`` side is the left."""
        rel = points[:, None, :] - self.start[None, :, :]
        cross = self.direction[None, :, 0] * rel[:, :, 1] - self.direction[None, :, 1] * rel[:, :, 0]
        return cross / self.length[None, :] * self.in_sign[None, :]

    def crossing_within(self, line: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """Whether the straight path from ``before`` to ``after`` meets each line within its segment.

        Args:
            line: (k,) int line indices.
            before, after: (k, 2) float64 points on opposite sides of their line (signed distances of opposite
                signs), px.

        Returns:
            (k,) bool: the path's intersection with the line's extension lies between the line's two points.
        """
        s_before = self._distance_to(line, before)
        s_after = self._distance_to(line, after)
        fraction = s_before / (s_before - s_after)
        meet = before + (after - before) * fraction[:, None]
        t = np.einsum("ij,ij->i", meet - self.start[line], self.direction[line]) / self.length[line] ** 2
        return (t >= 0.0) & (t <= 1.0)

    def _distance_to(self, line: np.ndarray, points: np.ndarray) -> np.ndarray:
        rel = points - self.start[line]
        d = self.direction[line]
        return (d[:, 0] * rel[:, 1] - d[:, 1] * rel[:, 0]) / self.length[line]


@dataclass(frozen=True)
class ZoneGeometry:
    """Z polygons as one array of edges.

    Attributes:
        edge_start, edge_end: (E, 2) float64 corners of every edge of every zone, zone after zone, px.
        first_edge: (Z,) int64 index of each zone's first edge in the edge arrays (for ``np.*.reduceat``).
        inverse_slope: (E,) float64 dx/dy of each edge; 0 for horizontal edges, which no horizontal ray crosses.
    """

    edge_start: np.ndarray
    edge_end: np.ndarray
    first_edge: np.ndarray
    inverse_slope: np.ndarray

    def inside(self, points: np.ndarray) -> np.ndarray:
        """(n, Z) bool: each point lies inside each polygon (crossing-number test, even-odd rule: a ray to the
        right of the point crosses an odd number of edges; Shimrat, "Algorithm 112: Position of point relative to
        polygon", CACM 1962). Points exactly on an edge may land on either side; the hysteresis band covers them."""
        if len(points) == 0:
            return np.zeros((0, len(self.first_edge)), bool)
        x, y = points[:, 0:1], points[:, 1:2]
        y1, y2 = self.edge_start[None, :, 1], self.edge_end[None, :, 1]
        spans = (y1 > y) != (y2 > y)
        x_cross = self.edge_start[None, :, 0] + (y - y1) * self.inverse_slope[None, :]
        crosses = spans & (x < x_cross)
        return (np.add.reduceat(crosses.astype(np.int64), self.first_edge, axis=1) % 2) == 1

    def boundary_distance(self, points: np.ndarray) -> np.ndarray:
        """(n, Z) float64 distance of each point to the nearest edge of each polygon, px."""
        if len(points) == 0:
            return np.zeros((0, len(self.first_edge)))
        d = self.edge_end - self.edge_start  # (E, 2)
        length2 = np.maximum(np.einsum("ij,ij->i", d, d), 1e-12)
        rel = points[:, None, :] - self.edge_start[None, :, :]  # (n, E, 2)
        t = np.clip((rel[:, :, 0] * d[None, :, 0] + rel[:, :, 1] * d[None, :, 1]) / length2[None, :], 0.0, 1.0)
        gap = rel - t[:, :, None] * d[None, :, :]
        dist = np.sqrt(gap[:, :, 0] ** 2 + gap[:, :, 1] ** 2)
        return np.minimum.reduceat(dist, self.first_edge, axis=1)


def build_geometry(cfg: AnalyticsConfig, frame_hw: tuple[int, int]) -> tuple[LineGeometry, ZoneGeometry]:
    """The lines and zones of ``cfg`` in pixels of a frame of ``frame_hw`` = (height, width) px (normalised
    coordinates are scaled by the width and height; pixel coordinates are used as they are)."""
    height, width = frame_hw
    scale = np.array([width, height], np.float64) if cfg.coordinates == "normalized" else np.ones(2)
    start = np.array([line.points[0] for line in cfg.lines], np.float64).reshape(-1, 2) * scale
    end = np.array([line.points[1] for line in cfg.lines], np.float64).reshape(-1, 2) * scale
    direction = end - start
    lines = LineGeometry(
        start=start,
        direction=direction,
        length=np.sqrt((direction**2).sum(axis=1)),
        in_sign=np.array([1.0 if line.in_side == "right" else -1.0 for line in cfg.lines]),
    )
    corners = [np.array(zone.polygon, np.float64) * scale for zone in cfg.zones]
    sizes = [len(c) for c in corners]
    edge_start = np.concatenate(corners).reshape(-1, 2) if corners else np.zeros((0, 2))
    edge_end = np.concatenate([np.roll(c, -1, axis=0) for c in corners]).reshape(-1, 2) if corners else np.zeros((0, 2))
    dx, dy = (edge_end - edge_start).T
    zones = ZoneGeometry(
        edge_start=edge_start,
        edge_end=edge_end,
        first_edge=np.cumsum([0, *sizes[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64),
        inverse_slope=np.divide(dx, dy, out=np.zeros_like(dx), where=dy != 0),
    )
    return lines, zones

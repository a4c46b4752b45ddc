"""The largest analytics geometry the limits allow: how long ``check`` takes to validate it, and what it costs the
edge per frame.

The geometry: zones of 256 corners each (the per-zone limit; star-shaped, so each is a simple polygon) up to
:data:`vcascade.core.schema.analytics.MAX_CORNERS` corners per camera, the rest in lines. Per frame: the anchors
of ``--detections`` boxes tested against every line and zone (inside, boundary distance, signed distance), as the
edge's analytics do.

    python -m tools.bench_geometry               # the full measurement, one line per figure
    python -m tools.bench_geometry --quick       # a quick pass (tests run it): same code, fewer repeats

Prints ``check_s``: seconds to validate the section (pydantic and the polygon checks), and ``frame_ms``: the median
per-frame cost, ms.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from vcascade.core.schema.analytics import MAX_CORNERS, AnalyticsConfig
from vcascade.edge.analytics.geometry import build_geometry

ZONE_CORNERS = 256
"""Corners of one zone at most (``ZoneConfig.polygon`` max_length)."""


def largest_geometry(width_px: float = 1920.0, height_px: float = 1080.0) -> dict:
    """The analytics section with the most corners the limits allow, as the YAML would hold it."""
    zones, lines, left = [], [], MAX_CORNERS
    while left >= ZONE_CORNERS:
        k = len(zones)
        cx, cy = width_px * (0.2 + 0.1 * (k % 7)), height_px * (0.2 + 0.1 * (k % 5))
        polygon = [
            [cx + (60 + 30 * (i % 2)) * math.cos(2 * math.pi * i / ZONE_CORNERS),
             cy + (60 + 30 * (i % 2)) * math.sin(2 * math.pi * i / ZONE_CORNERS)]
            for i in range(ZONE_CORNERS)
        ]  # fmt: skip
        zones.append({"name": f"zone-{k}", "polygon": polygon})
        left -= ZONE_CORNERS
    while left >= 2 and len(lines) < 256:
        y = 10.0 + len(lines)
        lines.append({"name": f"line-{len(lines)}", "points": [[10.0, y], [width_px - 10.0, y]]})
        left -= 2
    return {"lines": lines, "zones": zones}


def measure(repeats: int, frames: int, detections: int) -> dict[str, float]:
    """``check_s`` (best of ``repeats`` validations) and ``frame_ms`` (median over ``frames``)."""
    raw = largest_geometry()
    check_s = min(_timed(lambda: AnalyticsConfig.model_validate(raw)) for _ in range(repeats))
    cfg = AnalyticsConfig.model_validate(raw)
    lines, zones = build_geometry(cfg, (1080, 1920))
    rng = np.random.default_rng(0)
    costs = []
    for _ in range(frames):
        points = rng.uniform((0, 0), (1920, 1080), size=(detections, 2))
        costs.append(_timed(lambda: (zones.inside(points), zones.boundary_distance(points),
                                     lines.signed_distance(points))))  # fmt: skip
    corners = 2 * len(cfg.lines) + sum(len(z.polygon) for z in cfg.zones)
    return {"corners": corners, "check_s": check_s, "frame_ms": 1000.0 * statistics.median(costs)}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one validation and 5 frames (a smoke run)")
    parser.add_argument("--detections", type=int, default=100, help="boxes per frame (default 100)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--model-dir", help="unused (every benchmark takes it)")
    args = parser.parse_args(argv)
    repeats, frames = (1, 5) if args.quick else (5, 200)
    result = measure(repeats, frames, args.detections)
    if args.json:
        args.json.write_text(json.dumps({**result, "detections": args.detections}))
    print(f"corners {result['corners']}")
    print(f"check_s {result['check_s']:.3f}")
    print(f"frame_ms {result['frame_ms']:.2f} ({args.detections} detections)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

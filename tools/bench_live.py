"""The live section of ``tools/bench.py``: how many 25 fps cameras one edge holds, per clip and edge variant.

For each clip of ``--live-clips`` and each variant of ``--live-variants`` (:mod:`tools.bench_variants`), cameras
paced at 25 fps (the file played at its own rate, looped, newest-frame slots) are added one at a time, each count a
fresh ``vcascade run`` of ``--live-seconds`` of stream time with the track policy, until end-to-end p99 exceeds
:data:`LIVE_P99_MS` or frame age p99 (capture to the start of detection, the worst camera's) exceeds
:data:`LIVE_FRAME_AGE_MS`, or ``--live-max-cameras`` is reached. ``sustained_cameras`` is the largest count within
both budgets. Every run records the 1-minute load average before and after it (``os.getloadavg``): on a shared
host a run under a load above the cores measures the host, not the edge.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from tools.bench_variants import EdgeVariant

LIVE_P99_MS, LIVE_FRAME_AGE_MS = 150.0, 200.0
"""Budgets of a sustained camera count: end-to-end p99 and frame-age p99, ms."""

Runner = Callable[[int, str, EdgeVariant, float], dict[str, Any]]
"""``run(cameras, clip, variant, live_s)``: one live ``vcascade run``'s headline
(:func:`tools.bench_cascade.headline`)."""


def live(run: Runner, clips: list[str], variants: list[EdgeVariant], seconds: float, max_cameras: int,
         ) -> dict[str, Any]:  # fmt: skip
    """Search every clip x variant (module docstring).

    Returns:
        The budgets, ``seconds``, ``max_cameras`` and ``clips``: clip -> variant name -> :func:`search`'s result.
    """
    found = {clip: {v.name: search(run, clip, v, seconds, max_cameras) for v in variants} for clip in clips}
    return {"p99_budget_ms": LIVE_P99_MS, "frame_age_budget_ms": LIVE_FRAME_AGE_MS, "seconds": seconds,
            "max_cameras": max_cameras, "clips": found}  # fmt: skip


def search(run: Runner, clip: str, variant: EdgeVariant, seconds: float, max_cameras: int) -> dict[str, Any]:
    """1, 2, ... cameras until a run misses a budget or ``max_cameras`` ran.

    Returns:
        ``sustained_cameras`` (0: not even one) and ``runs``: camera count -> headline with ``within`` (both
        budgets met) and ``load_before``/``load_after`` (1-minute load averages).
    """
    runs: dict[int, dict[str, Any]] = {}
    sustained = 0
    for cameras in range(1, max_cameras + 1):
        load_before = os.getloadavg()[0]
        result = run(cameras, clip, variant, seconds)
        result.update(load_before=load_before, load_after=os.getloadavg()[0], within=within_budgets(result))
        runs[cameras] = result
        if not result["within"]:
            break
        sustained = cameras
    return {"sustained_cameras": sustained, "runs": runs}


def within_budgets(result: dict[str, Any]) -> bool:
    """Whether a run's p99 and frame-age p99 are within :data:`LIVE_P99_MS` and :data:`LIVE_FRAME_AGE_MS` (a run
    without any result is not)."""
    p99 = result["p99_ms"]
    return p99 is not None and p99 <= LIVE_P99_MS and result["frame_age_p99_ms"] <= LIVE_FRAME_AGE_MS


def print_live(result: dict[str, Any], console: Console) -> None:
    """One table of every run (clip, variant, camera count) and the cameras sustained per clip and variant."""
    budgets = f"p99 {result['p99_budget_ms']:.0f} ms, frame age {result['frame_age_budget_ms']:.0f} ms"
    table = Table(title=f"live load: 25 fps cameras, {result['seconds']:.0f} s each, track policy (budgets: {budgets})")
    for col in ("clip", "variant", "cameras", "frames/s", "detector runs/frame", "skipped", "p50 ms", "p99 ms",
                "frame age p99 ms", "busiest", "CPU util (1.0 = a core)", "load before/after"):
        table.add_column(col, justify="left" if col in ("clip", "variant", "busiest") else "right")
    for clip, variants in result["clips"].items():
        for name, found in variants.items():
            for cameras, run in found["runs"].items():
                util = ", ".join(f"{k.split(' ')[0]} {v:.2f}" for k, v in sorted(run["cpu_utilisation"].items())
                                 if k != "launcher")  # fmt: skip
                table.add_row(clip, name, str(cameras), f"{run['fps']:.1f}", f"{run['detector_runs_per_frame']:.2f}",
                              str(run["skipped"]), _ms(run["p50_ms"]), _ms(run["p99_ms"]),
                              f"{run['frame_age_p99_ms']:.0f}", str(run["busiest"]), util,
                              f"{run['load_before']:.1f} / {run['load_after']:.1f}")  # fmt: skip
    console.print(table)
    summary = Table(title="live cameras sustained at 25 fps")
    summary.add_column("clip")
    variants = list(next(iter(result["clips"].values()), {}))
    for name in variants:
        summary.add_column(name, justify="right")
    for clip, found in result["clips"].items():
        summary.add_row(clip, *(_sustained(found[name], result["max_cameras"]) for name in variants))
    console.print(summary)


def _sustained(found: dict[str, Any], max_cameras: int) -> str:
    n = found["sustained_cameras"]
    return f">= {n} (the most tried)" if n == max_cameras else str(n)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"

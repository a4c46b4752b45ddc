"""How each worker's recognizer is split into stages: profile it, predict each stage's cost, print the tables
(``vcascade plan``, :mod:`vcascade.app.commands.plan`).

For each worker (or the one named) the recognizer is loaded and profiled on a sample micro-batch (random
normal input at the recognizer's ``input_hw``, ``--batch`` items, default the worker's ``max_batch``) exactly
as a worker with ``split_points: auto`` does at start-up (:func:`vcascade.center.stages.runtimes.auto_split`: profile, balance,
build the stages on the worker's devices, time them, recalibrate, balance again); then one rich table per
worker gives each stage's device, its layers (first..last and count), its predicted ms per micro-batch and
share of the total, and the balance ratio (slowest / mean stage). Explicit split points are shown as
configured (predicted on the same calibrated profile), with what ``auto`` would choose beside them; ``auto``
shows the choice the worker makes at start-up. Nothing is written to disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from rich.text import Text

from vcascade.center.stages.runtimes import (
    auto_split,
    default_sample,
    explicit_plan,
    runtime_key,
    runtime_of,
    with_stage_threads,
)
from vcascade.core.config import Deployment
from vcascade.core.runtime.threads import stage_threads_of


@dataclass(frozen=True)
class WorkerPlan:
    """The split of one worker's recognizer.

    Attributes:
        worker / recognizer: names from the file; ``runtime``: the recognizer's runtime (``type``, or ``torch+onnxruntime``).
        devices: the worker's devices (one per stage).
        explicit: True when the file lists split points, False for ``auto``.
        split_points: the split points used (configured, or chosen by ``auto``).
        plan: predicted per-stage ms of ``split_points``; ``auto_points`` / ``auto_plan``: the balanced choice.
        profile: the measured :class:`vcascade.center.stages.profile.ModelProfile`.
    """

    worker: str
    recognizer: str
    runtime: str
    devices: tuple[str, ...]
    explicit: bool
    split_points: tuple[str, ...]
    plan: Any
    auto_points: tuple[str, ...]
    auto_plan: Any
    profile: Any


def plan_worker(dep: Deployment, worker: str, batch: int | None = None, model_dir: str | None = None) -> WorkerPlan:
    """Profile worker ``worker``'s recognizer and predict its stage costs (see the module docstring).

    Raises:
        KeyError: no such worker; ValueError: a configured split point the model cannot be split at;
        FileNotFoundError / model load errors from :func:`vcascade.center.stages.runtimes.runtime_of`'s loader.
    """
    cfg = dep.workers[worker]
    threads = stage_threads_of(cfg)
    rec = with_stage_threads(dep.recognizers[cfg.recognizer], threads)
    torch.set_num_threads(threads)
    runtime = runtime_of(rec)
    model = runtime.load_model(rec, model_dir)
    if rec.split_points != "auto":
        runtime.build(model, rec, rec.split_points, cfg.devices)  # the worker's own check of its split points
    best = auto_split(runtime, model, rec, cfg.devices, default_sample(rec, batch or cfg.max_batch))
    explicit = rec.split_points != "auto"
    points = tuple(rec.split_points) if explicit else best.split_points
    plan = explicit_plan(best.profile, points) if explicit else best.plan
    return WorkerPlan(
        worker, cfg.recognizer, runtime_key(rec), tuple(cfg.devices), explicit, points, plan,
        best.split_points, best.plan, best.profile,
    )


def stage_rows(wp: WorkerPlan, plan) -> list[tuple[str, str, str, str, int, float, float]]:
    """(stage, device, first layer, last layer, layer count, predicted ms, share %) per stage of ``plan``."""
    segments = wp.profile.segments
    bounds = [0, *plan.cuts, len(segments)]
    rows = []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        layers = [name for seg in segments[a:b] for name in seg.layers]
        share = 100.0 * plan.stage_ms[k] / plan.total_ms if plan.total_ms > 0 else 0.0
        rows.append((str(k), wp.devices[k], layers[0], layers[-1], len(layers), plan.stage_ms[k], share))
    return rows


def render(console: Console, wp: WorkerPlan) -> None:
    """Print the worker's table(s): the split in use, and the auto choice beside explicit split points."""
    mode = "explicit" if wp.explicit else "auto"
    _header(console, f"{wp.worker}: {wp.recognizer} ({wp.runtime}), {mode} split points {list(wp.split_points)}, "
                     f"micro-batch {wp.profile.batch}")  # fmt: skip
    console.print(_table(wp, wp.plan))
    if wp.explicit:
        _header(console, f"{wp.worker}: auto would choose {list(wp.auto_points)}")
        console.print(_table(wp, wp.auto_plan))


def _header(console: Console, text: str) -> None:
    console.print(text, style="bold", markup=False, highlight=False, soft_wrap=True)


def _table(wp: WorkerPlan, plan) -> Table:
    table = Table(caption=f"balance ratio (slowest / mean stage): {plan.ratio:.2f}")
    for name, justify in [("stage", "right"), ("device", "left"), ("first layer", "left"), ("last layer", "left"),
                          ("layers", "right"), ("predicted ms", "right"), ("share", "right")]:  # fmt: skip
        table.add_column(name, justify=justify)
    for stage, device, first, last, count, ms, share in stage_rows(wp, plan):
        table.add_row(stage, Text(device), Text(first), Text(last), str(count), f"{ms:.1f}", f"{share:.0f}%")
    return table

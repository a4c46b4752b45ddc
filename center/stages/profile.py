"""Measure the cost of each splittable unit of a recognizer on a sample micro-batch (for :mod:`vcascade.center.stages.balance`).

* torch: the units are the children of the model's sequential containers (``nn.Sequential``, or an unflattened
  ``torch.export`` module whose children are named 0, 1, ...), e.g. ``features.0`` .. ``features.18`` for
  MobileNetV2; other leaf modules are units of their own. A forward pre-hook on each unit timestamps the moment
  it starts; a unit's cost is the time from its start to the next unit's start (the glue code between units is
  charged to the unit before it, the code before the first unit to the first), so the costs sum to the whole
  forward pass. Channels-last like ``TorchStage``, one torch thread (the caller sets it), median of ``runs``
  passes after ``warmup`` passes.
* ONNX: the units are the node groups between consecutive cut points (:func:`vcascade.center.stages.onnx_stages.cut_points`).
  ONNX Runtime's profiler (``SessionOptions.enable_profiling``) gives each node's kernel time; it runs at the
  BASIC optimisation level, which keeps node names (the ALL level fuses and renames them), and the per-node
  shares are then scaled to the median time of the fully optimised model, so predicted stage costs are in the
  units of the sessions that will really run. Profiler files go to a temporary folder, deleted afterwards.

Nothing is cached on disk.
"""

from __future__ import annotations

import difflib
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from vcascade.center.stages.onnx_stages import cut_points, make_session, session_options


@dataclass(frozen=True)
class Segment:
    """A run of layers that always stays in one stage.

    Attributes:
        begins_at: the split-point name at which a stage may begin here (torch: module name, ONNX: tensor name);
            None for the first segment.
        layers: names of the modules (torch) or nodes (ONNX) in it, in execution order.
        cost_ms: measured cost, ms per sample micro-batch.
    """

    begins_at: str | None
    layers: tuple[str, ...]
    cost_ms: float


@dataclass(frozen=True)
class ModelProfile:
    """Per-segment costs of one model on one sample micro-batch of ``batch`` items, execution order."""

    segments: tuple[Segment, ...]
    batch: int

    @property
    def costs_ms(self) -> list[float]:
        """Segment costs, ms per micro-batch, execution order."""
        return [s.cost_ms for s in self.segments]

    def cuts_of(self, split_points: Sequence[str]) -> list[int]:
        """Segment indices where the named split points begin.

        Raises:
            ValueError: a name where no segment begins (lists a few valid names).
        """
        index = {s.begins_at: i for i, s in enumerate(self.segments) if s.begins_at is not None}
        for name in split_points:
            if name not in index:
                near = difflib.get_close_matches(name, list(index), n=5) or list(index)[:5]
                raise ValueError(
                    f"split point {name!r} is not a place where this model can be split; {len(index)} valid "
                    f"split points, e.g. {', '.join(near)}"
                )
        return [index[name] for name in split_points]

    def calibrated(self, cuts: Sequence[int], measured_ms: Sequence[float]) -> "ModelProfile":
        """This profile with each stage's segments scaled so the stages of ``cuts`` sum to ``measured_ms``.

        Used once the stages exist: ``measured_ms[k]`` is stage k's measured time (ms per micro-batch), which
        also holds what per-unit timing misses (ONNX Runtime's fusions at the ALL level, hand-over between
        stages). A stage predicted at 0 ms keeps its costs.

        Raises:
            ValueError: ``len(measured_ms) != len(cuts) + 1``.
        """
        if len(measured_ms) != len(cuts) + 1:
            raise ValueError(f"{len(cuts) + 1} stages but {len(measured_ms)} measured times")
        bounds = [0, *cuts, len(self.segments)]
        scaled = []
        for (a, b), measured in zip(zip(bounds, bounds[1:]), measured_ms):
            predicted = sum(s.cost_ms for s in self.segments[a:b])
            factor = measured / predicted if predicted > 0 else 1.0
            scaled.extend(Segment(s.begins_at, s.layers, s.cost_ms * factor) for s in self.segments[a:b])
        return ModelProfile(tuple(scaled), self.batch)

    def split_points_of(self, cuts: Sequence[int]) -> list[str]:
        """The split-point names of segment indices (the inverse of :meth:`cuts_of`)."""
        return [self.segments[i].begins_at for i in cuts]


def candidate_units(model: nn.Module) -> list[str]:
    """Names of the splittable units of ``model`` (``named_modules`` keys), in registration order."""
    units: list[str] = []

    def visit(module: nn.Module, prefix: str) -> None:
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if _is_sequential(child):
                units.extend(f"{full}.{sub}" for sub, _ in child.named_children())
            elif any(True for _ in child.children()):
                visit(child, f"{full}.")
            else:
                units.append(full)

    visit(model, "")
    return units


def _is_sequential(module: nn.Module) -> bool:
    names = [name for name, _ in module.named_children()]
    return isinstance(module, nn.Sequential) or (bool(names) and all(name.isdigit() for name in names))


def profile_torch(model: nn.Module, sample: torch.Tensor, runs: int = 5, warmup: int = 1) -> ModelProfile:
    """Per-unit cost of ``model`` (eval mode, CPU) on ``sample``, an (N, C, H, W) float32 micro-batch.

    Only units called exactly once per forward pass are kept (a unit called twice cannot begin a stage).

    Raises:
        ValueError: the model has no unit, or ``runs < 1``.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    names = candidate_units(model)
    if not names:
        raise ValueError("the model has no submodule to split at")
    modules = dict(model.named_modules())
    model = model.to(memory_format=torch.channels_last)
    x = sample.contiguous(memory_format=torch.channels_last) if sample.dim() == 4 else sample
    passes = [_timed_pass(model, modules, names, x) for _ in range(warmup + runs)][warmup:]
    order = [name for name, _ in passes[0][0]]
    counts = {name: order.count(name) for name in order}
    return _torch_segments(passes, [n for n in order if counts[n] == 1], sample.shape[0])


def _timed_pass(model: nn.Module, modules: dict, names: list[str], x: torch.Tensor):
    """One forward pass: ([(unit name, start time s)], start s, end s)."""
    starts: list[tuple[str, float]] = []
    handles = [
        modules[name].register_forward_pre_hook(lambda _m, _a, name=name: starts.append((name, time.perf_counter())))
        for name in names
    ]
    try:
        with torch.inference_mode():
            begin = time.perf_counter()
            model(x)
            end = time.perf_counter()
    finally:
        for handle in handles:
            handle.remove()
    return starts, begin, end


def _torch_segments(passes, units: list[str], batch: int) -> ModelProfile:
    """Median per-unit cost over passes: unit start to the next kept unit's start (first from pass start)."""
    per_unit: dict[str, list[float]] = {name: [] for name in units}
    keep = set(units)
    for starts, begin, end in passes:
        times = [(name, t) for name, t in starts if name in keep]
        bounds = [begin, *(t for _, t in times[1:]), end]
        for (name, _), a, b in zip(times, bounds, bounds[1:]):
            per_unit[name].append((b - a) * 1e3)
    segments = [
        Segment(None if i == 0 else name, (name,), statistics.median(per_unit[name])) for i, name in enumerate(units)
    ]
    return ModelProfile(tuple(segments), batch)


def profile_onnx(
    model: onnx.ModelProto, sample: np.ndarray, runs: int = 5, warmup: int = 1, intra_op_threads: int = 1
) -> ModelProfile:
    """Per-segment cost of ``model`` on ``sample`` (its first input, e.g. (N, 3, 48, 320) float32), CPU.

    Raises:
        ValueError: ``runs < 1``; ONNX Runtime errors for an input that does not fit the model.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    node_ms = _node_costs_ms(model, sample, runs, warmup, intra_op_threads)
    scale = _optimised_ms(model, sample, runs, warmup, intra_op_threads) / max(sum(node_ms.values()), 1e-9)
    cuts = cut_points(model)
    starts = [0, *(cut.node_index for cut in cuts), len(model.graph.node)]
    names = [None, *(cut.tensor for cut in cuts)]
    segments = []
    for begins_at, a, b in zip(names, starts, starts[1:]):
        layers = tuple(node.name or f"#{a + i}" for i, node in enumerate(model.graph.node[a:b]))
        segments.append(Segment(begins_at, layers, scale * sum(node_ms.get(name, 0.0) for name in layers)))
    return ModelProfile(tuple(segments), int(sample.shape[0]))


def _feeds(session: ort.InferenceSession, sample: np.ndarray) -> dict[str, np.ndarray]:
    return {session.get_inputs()[0].name: np.ascontiguousarray(sample)}


def _node_costs_ms(
    model: onnx.ModelProto, sample: np.ndarray, runs: int, warmup: int, threads: int
) -> dict[str, float]:
    """Median kernel time per node name over the last ``runs`` profiled runs, ms (BASIC optimisation level)."""
    options = session_options(threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with tempfile.TemporaryDirectory(prefix="vcascade-profile-") as folder:
        options.enable_profiling = True
        options.profile_file_prefix = f"{folder}/ort"
        session = make_session(model, "cpu", options)
        feeds = _feeds(session, sample)
        for _ in range(warmup + runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    return _parse_node_events(events, runs)


def _parse_node_events(events: list[dict], runs: int) -> dict[str, float]:
    """``{node name: median ms}`` from an ORT profile (Chrome trace JSON: ``dur``/``ts`` in µs)."""
    runs_seen = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in runs_seen)[-runs:]
    per_node: dict[str, list[float]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        run = next((i for i, (a, b) in enumerate(windows) if a <= event["ts"] <= b), None)
        if run is None:
            continue  # a warm-up run
        times = per_node.setdefault(name.removesuffix("_kernel_time"), [0.0] * len(windows))
        times[run] += event["dur"] / 1e3
    return {name: statistics.median(times) for name, times in per_node.items()}


def _optimised_ms(model: onnx.ModelProto, sample: np.ndarray, runs: int, warmup: int, threads: int) -> float:
    """Median wall time of the whole model at the ALL optimisation level, ms."""
    session = make_session(model, "cpu", session_options(threads))
    feeds = _feeds(session, sample)
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure_stages(stages: Sequence[Callable[[tuple], Any]], x: Any, runs: int = 3) -> list[float]:
    """Median time of each stage on the activations the previous one produced from ``x``, ms (one warm-up run
    each, then ``runs`` timed with ``time.perf_counter``). A stage takes and returns a tuple of activations."""
    activations, times_ms = (x,), []
    for stage in stages:
        stage(activations)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            output = stage(activations)
            samples.append((time.perf_counter() - start) * 1e3)
        times_ms.append(statistics.median(samples))
        activations = output
    return times_ms

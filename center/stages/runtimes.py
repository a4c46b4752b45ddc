"""One entry point from a recognizer config to its pipeline stages, whatever the runtime (registry by ``type``).

``load_recognizer_stages(rec_cfg, devices)`` loads the model, resolves ``split_points: auto`` (profile one
sample micro-batch with :mod:`vcascade.center.stages.profile`, then :func:`vcascade.center.stages.balance.balance` over ``len(devices)``
stages), splits and places one stage per device. Every stage takes the previous stage's activations tuple and
returns a tuple; torch stages pass torch tensors, ONNX stages numpy arrays. :func:`input_device` says where
the worker prepares the first stage's input, :func:`stage_input` turns a float32 sample batch into what the
first stage wants.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vcascade.center.stages.balance import Plan, balance, plan_for_cuts
from vcascade.center.stages.calibrated import build_calibrated_stages
from vcascade.center.stages.model_files import resolve_onnx_model
from vcascade.center.stages.onnx_contract import check_embedding_output, check_onnx_contract
from vcascade.center.stages.onnx_stages import build_onnx_stages, fit_batch, load_onnx
from vcascade.center.intake.preprocess import to_device
from vcascade.center.stages.profile import ModelProfile, measure_stages, profile_onnx, profile_torch
from vcascade.center.stages.torch_stages import build_model, place_stages
from vcascade.center.stages.text_pipeline import build_ocr_stages, load_ocr_models, profile_ocr
from vcascade.center.stages.torch_onnx import torch_to_onnx
from vcascade.core.config import RecognizerConfig, TorchRecognizerConfig

log = logging.getLogger(__name__)

Stage = Callable[[tuple], tuple]
"""A pipeline stage: the previous stage's activations tuple in, its own out (TorchStage or OnnxStage)."""

PROFILE_BATCH = 4
"""Micro-batch size profiled for ``split_points: auto`` at worker start-up (costs scale ~linearly with it)."""


@dataclass(frozen=True)
class Runtime:
    """How one recognizer ``type`` is loaded, profiled and fed.

    Attributes:
        load_model: ``(cfg, model_dir) -> model`` (an ``nn.Module`` or an ``onnx.ModelProto``).
        profile: ``(model, cfg, sample) -> ModelProfile``; ``sample`` is (N, 3, H, W) float32 numpy.
        build: ``(model, cfg, split_points, devices) -> stages``.
        takes_torch: the first stage wants a torch tensor on its device (else a numpy array).
        fit_sample: ``(model, sample) -> sample`` the profiling sample adapted to the model (a fixed batch size).
    """

    load_model: Callable[[Any, str | None], Any]
    profile: Callable[[Any, Any, np.ndarray], ModelProfile]
    build: Callable[[Any, Any, Sequence[str], Sequence[str]], list[Stage]]
    takes_torch: bool
    fit_sample: Callable[[Any, np.ndarray], np.ndarray] = lambda model, sample: sample


def _torch_build(model, cfg: TorchRecognizerConfig, split_points, devices) -> list[Stage]:
    return place_stages(model, split_points, devices, cfg.input_hw)


def _ort_build(model, cfg, split_points, devices) -> list[Stage]:
    return build_onnx_stages(model, split_points, devices, cfg.intra_op_threads or 1, cfg.allow_spinning)


def _ort_profile(model, cfg, sample: np.ndarray) -> ModelProfile:
    return profile_onnx(model, sample, intra_op_threads=cfg.intra_op_threads or 1)


RUNTIMES: dict[str, Runtime] = {
    "torch": Runtime(
        load_model=lambda cfg, model_dir: build_model(cfg),
        profile=lambda model, cfg, sample: profile_torch(model, torch.from_numpy(sample)),
        build=_torch_build,
        takes_torch=True,
    ),
    "onnx": Runtime(
        load_model=lambda cfg, model_dir: _load_checked_onnx(cfg, model_dir),
        profile=_ort_profile,
        build=_ort_build,
        takes_torch=False,
        fit_sample=fit_batch,
    ),
    "torch+onnxruntime": Runtime(  # a torch recognizer with engine: onnxruntime (center.stages.torch_onnx)
        load_model=lambda cfg, model_dir: torch_to_onnx(build_model(cfg), cfg.input_hw),
        profile=_ort_profile,
        build=_ort_build,
        takes_torch=False,
        fit_sample=fit_batch,
    ),
    "ocr": Runtime(  # text detection then recognition of each region (center.stages.text_pipeline)
        load_model=load_ocr_models,
        profile=profile_ocr,
        build=build_ocr_stages,
        takes_torch=False,
    ),
    "calibrated": Runtime(  # no model: measured service times per micro-batch size (center.stages.calibrated)
        load_model=lambda cfg, model_dir: None,
        profile=lambda model, cfg, sample: _no_profile(cfg),
        build=lambda model, cfg, split_points, devices: build_calibrated_stages(cfg, devices),
        takes_torch=False,
    ),
}


def _load_checked_onnx(cfg, model_dir):
    """The recognizer's ONNX model, checked against its ``input_hw`` and ``head.dim`` (center/stages/onnx_contract.py)."""
    path = resolve_onnx_model(cfg.model, model_dir)
    model = load_onnx(path)
    check_onnx_contract(model, cfg, path)
    return model


def _no_profile(cfg) -> ModelProfile:
    raise ValueError("a calibrated recognizer has no model to profile (its split_points must stay empty)")


def runtime_key(rec_cfg: RecognizerConfig) -> str:
    """The :data:`RUNTIMES` key of a recognizer: its ``type``, or ``torch+onnxruntime`` for a torch recognizer
    with ``engine: onnxruntime``."""
    if isinstance(rec_cfg, TorchRecognizerConfig) and rec_cfg.engine == "onnxruntime":
        return "torch+onnxruntime"
    return rec_cfg.type


def with_stage_threads(rec_cfg: RecognizerConfig, threads: int) -> RecognizerConfig:
    """``rec_cfg`` with its unset ``intra_op_threads`` (ONNX Runtime sessions: ``type: onnx``, or ``engine:
    onnxruntime``) filled in with ``threads``, the process's threads per stage
    (:func:`vcascade.core.runtime.threads.threads_per_stage`); torch stage threads call ``torch.set_num_threads`` instead."""
    if rec_cfg.intra_op_threads is None:
        return rec_cfg.model_copy(update={"intra_op_threads": threads})
    return rec_cfg


def runtime_of(rec_cfg: RecognizerConfig) -> Runtime:
    """The registered :class:`Runtime` of the recognizer (:func:`runtime_key`); KeyError names the known ones."""
    key = runtime_key(rec_cfg)
    try:
        return RUNTIMES[key]
    except KeyError:
        raise KeyError(f"no stage runtime {key!r} (have {sorted(RUNTIMES)})") from None


def default_sample(rec_cfg: RecognizerConfig, batch: int = PROFILE_BATCH, seed: int = 0) -> np.ndarray:
    """A deterministic (batch, 3, H, W) float32 standard-normal micro-batch at the recognizer's ``input_hw``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, 3, *rec_cfg.input_hw), dtype=np.float32)


def auto_plan(profile: ModelProfile, num_stages: int) -> Plan:
    """The balanced plan of ``profile`` over ``num_stages`` stages (:func:`vcascade.center.stages.balance.balance`)."""
    return balance(profile.costs_ms, num_stages)


def explicit_plan(profile: ModelProfile, split_points: Sequence[str]) -> Plan:
    """The predicted plan of explicit split points (ValueError for a name the profile does not know)."""
    return plan_for_cuts(profile.costs_ms, profile.cuts_of(split_points))


@dataclass(frozen=True)
class AutoSplit:
    """What ``split_points: auto`` chose.

    Attributes:
        split_points: the chosen split-point names (K-1).
        plan: their predicted per-stage ms on the calibrated profile.
        profile: the profile, calibrated with the first stages' measured times (:meth:`ModelProfile.calibrated`).
        stages: the stages built at ``split_points``, on the given devices.
    """

    split_points: tuple[str, ...]
    plan: Plan
    profile: ModelProfile
    stages: list


def auto_split(runtime: Runtime, model: Any, rec_cfg: RecognizerConfig, devices: Sequence[str],
               sample: np.ndarray) -> AutoSplit:  # fmt: skip
    """Profile, balance, build; then time the built stages on ``sample``, rescale the profile per stage to those
    times and balance again, rebuilding once if the choice moves (per-unit times miss cross-unit effects such
    as ONNX Runtime's fusions; measured stage times do not).

    Raises:
        ValueError: fewer cut points than ``len(devices) - 1``; RuntimeError: an unavailable device.
    """
    sample = runtime.fit_sample(model, sample)
    profile = runtime.profile(model, rec_cfg, sample)
    plan = auto_plan(profile, len(devices))
    stages = runtime.build(model, rec_cfg, profile.split_points_of(plan.cuts), devices)
    if len(devices) > 1:
        first_input = stage_input(rec_cfg, sample, devices[0])
        profile = profile.calibrated(plan.cuts, measure_stages(stages, first_input))
        calibrated = auto_plan(profile, len(devices))
        if calibrated.cuts != plan.cuts:
            stages = runtime.build(model, rec_cfg, profile.split_points_of(calibrated.cuts), devices)
        plan = calibrated
    return AutoSplit(tuple(profile.split_points_of(plan.cuts)), plan, profile, stages)


def load_recognizer_stages(
    rec_cfg: RecognizerConfig,
    devices: Sequence[str],
    sample_batch: np.ndarray | None = None,
    model_dir: str | os.PathLike[str] | None = None,
) -> list[Stage]:
    """Load, split (``split_points: auto``: see :func:`auto_split`) and place the recognizer, one stage per device.

    Args:
        rec_cfg: a recognizer config (torch or onnx).
        devices: one device per stage (``cpu``, ``cuda:N``); K = ``len(devices)``.
        sample_batch: (N, 3, H, W) float32 micro-batch to profile for ``auto`` (default :func:`default_sample`).
        model_dir: extra folder searched first for an ONNX ``model`` name.

    Raises:
        ValueError: explicit split points giving other than K stages, or a bad split point name;
        FileNotFoundError: a missing model file; RuntimeError: an unavailable CUDA device; model load errors.
    """
    runtime = runtime_of(rec_cfg)
    model = runtime.load_model(rec_cfg, model_dir)
    if rec_cfg.split_points != "auto":
        return runtime.build(model, rec_cfg, rec_cfg.split_points, devices)
    sample = default_sample(rec_cfg) if sample_batch is None else sample_batch
    chosen = auto_split(runtime, model, rec_cfg, devices, sample)
    log.info("auto split points %s: predicted stage ms %s (ratio %.2f)", list(chosen.split_points),
             [round(ms, 1) for ms in chosen.plan.stage_ms], chosen.plan.ratio)  # fmt: skip
    return chosen.stages


def warm_up(stages: Sequence[Stage], rec_cfg: RecognizerConfig, device: str, batch: int, *, last: bool = True) -> float:
    """Run one full micro-batch through ``stages`` before serving (as Triton's ``model_warmup``), returning s.

    The runtimes allocate on first use: ONNX Runtime's arena grows to the largest batch it has seen and torch's
    allocator caches. Warming up with ``batch`` (the largest micro-batch the worker can form) gets memory to its
    plateau before the first ROI, so the first ROIs are not slow and RSS does not step up later when the first
    full micro-batch arrives (``tools/soak.py`` checks RSS growth after the warm-up). A first stage whose
    model fixes its batch size (``OnnxStage.fixed_batch``) is warmed up at that size instead.

    Args:
        stages: the stages this process runs (a worker with a ``downstream`` stage group: its local ones; the
            stage group's own stages are not warmed up).
        rec_cfg: the recognizer (``input_hw`` and the first stage's input type).
        device: the first stage's device.
        batch: micro-batch size (>= 1); the input is :func:`default_sample`, (batch, 3, H, W) float32.
        last: ``stages`` end with the recognizer's last stage: its output is checked against an embedding
            head's ``dim`` (:func:`vcascade.center.stages.onnx_contract.check_embedding_output`).

    Returns:
        The warm-up's wall time, s.

    Raises:
        RuntimeError: a stage failed on the micro-batch; the message names the batch and the stage.
        ModelContractError: (a ValueError) the output's length per crop is not the embedding head's ``dim``.
    """
    start_s = time.perf_counter()
    if stages and getattr(stages[0], "fixed_batch", None):
        batch = stages[0].fixed_batch
    activations: tuple = (stage_input(rec_cfg, default_sample(rec_cfg, batch), device),)
    for index, stage in enumerate(stages):
        try:
            activations = stage(activations)
        except Exception as exc:  # noqa: BLE001 - any runtime error: re-raised with what was being done
            raise RuntimeError(f"warm-up micro-batch of {batch} failed in stage {index}: {exc}") from exc
    if stages and last:  # the recognizer's own output: its embedding length is what head.dim says
        check_embedding_output(tuple(activations[0].shape), getattr(rec_cfg.head, "dim", None))
    return time.perf_counter() - start_s


def input_device(rec_cfg: RecognizerConfig, device: str) -> str:
    """Where the first stage takes its input: its own ``device`` for torch runtimes, ``cpu`` for ONNX Runtime
    sessions (they read host arrays and copy them to their device themselves)."""
    return device if runtime_of(rec_cfg).takes_torch else "cpu"


def stage_input(rec_cfg: RecognizerConfig, batch: np.ndarray, device: str) -> torch.Tensor | np.ndarray:
    """The first stage's input from an (n, 3, H, W) float32 sample batch: a torch tensor on ``device`` for
    torch runtimes (:func:`vcascade.center.intake.preprocess.to_device`), the numpy array itself for ONNX."""
    return to_device(batch, device) if runtime_of(rec_cfg).takes_torch else batch

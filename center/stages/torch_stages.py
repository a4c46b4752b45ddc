"""Build the torch recognizer from its config and split it into pipeline stages, one per device.

The model is either ``factory(**factory_kwargs)`` loaded with a state dict (``weights``), or a saved
``torch.export`` program (``program``, a ``.pt2`` file read with ``torch.export.load``); a program is turned back
into a module hierarchy with ``torch.export.unflatten`` so its submodule names (``features.3``, ...) can be
split points, exactly as for the factory form.

Splitting uses ``torch.distributed.pipelining.pipeline`` (torch.export under the hood) with
``SplitPoint.BEGINNING`` at each configured submodule name; ``pipe.get_stage_module(i)`` is stage ``i``.
The stage modules are traced with an example micro-batch but accept other batch sizes, and their chained
output equals the unsplit model's output exactly (checked for MobileNetV2 at ``features.10``, torch 2.13 CPU;
see tests/center/stages/test_torch_stages.py). Splitting takes a few seconds: do it once at start-up.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from vcascade.center.stages.transfer import Placement
from vcascade.core.config import TorchRecognizerConfig
from vcascade.core.runtime.resources import resolve

Activations = tuple[torch.Tensor, ...]
"""What flows between stages: the positional inputs of the next stage module."""

EXAMPLE_BATCH = 2
"""Batch size of the example micro-batch used to trace the model for splitting (small: tracing cost only)."""


def import_factory(spec: str):
    """Resolve ``"package.module:callable"`` (the callable may be dotted, ``Class.method``).

    Raises:
        ImportError: the module cannot be imported (the original error is chained, never swallowed).
        AttributeError: the module has no such callable.
    """
    module_name, _, attr_path = spec.partition(":")
    obj = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    return obj


def build_model(cfg: TorchRecognizerConfig) -> nn.Module:
    """Instantiate the recognizer with ``factory(**factory_kwargs)`` and load its state dict, in eval mode
    (or load its ``program``: see :func:`load_program`).

    Weights are read with ``torch.load(..., weights_only=True)`` (no arbitrary unpickling) onto the CPU.

    Raises:
        ValueError: neither ``program`` nor both ``factory`` and ``weights`` (``load_config`` reports it first);
        ImportError / AttributeError: bad factory; FileNotFoundError (incl. ResourceNotFound): missing weights;
        RuntimeError: state-dict keys or shapes do not match the model.
    """
    if cfg.program is not None:
        return load_program(cfg.program)
    if cfg.factory is None or cfg.weights is None:
        raise ValueError("a torch recognizer needs `factory` + `weights`, or `program`")
    model = import_factory(cfg.factory)(**cfg.factory_kwargs)
    state = torch.load(resolve(cfg.weights), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.eval()


def load_program(uri: str) -> nn.Module:
    """Load a ``torch.export`` program (``torch.export.save`` output) as an unflattened module, eval mode.

    Args:
        uri: file path or ``package://`` URI of the ``.pt2`` file.

    Raises:
        FileNotFoundError (incl. ResourceNotFound): no such file; RuntimeError and friends from
        ``torch.export.load`` for a file that is not a saved program.
    """
    path = resolve(uri)
    if not Path(path).is_file():
        raise FileNotFoundError(f"torch.export program {path} does not exist")
    with warnings.catch_warnings():
        # torch 2.13 warns when saved weights share storage (e.g. channels-last views); loading is onto the CPU,
        # where it is harmless (round trip checked bit-exact in tests/center/stages/test_torch_stages.py)
        warnings.filterwarnings("ignore", message="No complete tensor found in the group", category=UserWarning)
        program = torch.export.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unflatten warns about its own experimental status
        return torch.export.unflatten(program).eval()


def split_model(model: nn.Module, split_points: Sequence[str], example: torch.Tensor) -> list[nn.Module]:
    """Split ``model`` into ``len(split_points) + 1`` stage modules, in order.

    Args:
        model: an eval-mode module taking one tensor.
        split_points: names of submodules (``named_modules`` keys, e.g. ``"features.10"``) where a stage begins.
        example: a CPU example input, e.g. (2, 3, H, W) float32, used for tracing only.

    Returns:
        The stage modules (the unsplit ``model`` itself when there are no split points).
    """
    if not split_points:
        return [model]
    from torch.distributed.pipelining import SplitPoint, pipeline

    modules = dict(model.named_modules())
    saved = {name: modules[name].__dict__.get("forward") for name in split_points if name in modules}
    try:
        with warnings.catch_warnings():  # torch 2.13's own pipelining code trips a deprecation of its pytree API
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            pipe = pipeline(model, mb_args=(example,), split_spec={name: SplitPoint.BEGINNING for name in split_points})
    finally:
        _restore_forwards(modules, saved)
    return [pipe.get_stage_module(i).eval() for i in range(pipe.num_stages)]


def _restore_forwards(modules: dict[str, nn.Module], saved: dict[str, object]) -> None:
    """Undo ``pipeline()``'s in-place patch of each split-point module's ``forward`` (torch 2.13's
    ``annotate_split_points`` leaves it, marked "TODO: make this implementation out-of-place"): without this,
    a model split twice keeps its earlier split points, or recurses when a point is split at again."""
    for name, forward in saved.items():
        module = modules[name]
        module.__dict__.pop("_orig_forward", None)
        if forward is None:
            module.__dict__.pop("forward", None)
        else:
            module.__dict__["forward"] = forward


def as_activations(output) -> Activations:
    """Normalise a stage module's output (a tensor, or a tuple/list of tensors) to a tuple of tensors."""
    if isinstance(output, torch.Tensor):
        return (output,)
    return tuple(output)


class TorchStage:
    """One pipeline stage: a module on its device, called with the previous stage's activations.

    Calling it runs the module under ``torch.inference_mode()`` through :class:`vcascade.center.stages.transfer.Placement`: the
    inputs are moved to the device (pinned host memory, non-blocking copies), and on CUDA the stage computes on
    its own stream, waits on the previous stage's event instead of the whole device, and its thread waits for
    its own event before returning (so stage timestamps measure compute and the next stage reads a complete
    output).

    Weights and 4-d activations use the channels-last (NHWC) memory format: oneDNN's and cuDNN's fast
    convolution paths want it (measured here: MobileNetV2 on 1 CPU thread, batch 8, 1.3x faster than NCHW);
    the values are unchanged, only the memory layout differs.
    """

    def __init__(self, module: nn.Module, device: str) -> None:
        self.device = torch.device(device)
        self.module = module.to(self.device).to(memory_format=torch.channels_last)

    def __call__(self, inputs: Activations) -> Activations:
        """Run the stage. ``inputs``: tensors on any device; returns its outputs on this stage's device.

        Placement (own CUDA stream, waiting on the previous stage's event) is :class:`vcascade.center.stages.transfer.Placement`.
        """
        if "placement" not in self.__dict__:
            self.placement = Placement(self.device)
        return self.placement.run(self.module, inputs, _channels_last)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def place_stages(
    model: nn.Module, split_points: Sequence[str], devices: Sequence[str], input_hw: Sequence[int]
) -> list[TorchStage]:
    """Split ``model`` at ``split_points`` (traced with a (2, 3, *input_hw) float32 example) and place stage
    ``k`` on ``devices[k]``.

    Raises:
        ValueError: ``len(devices) != len(split_points) + 1``, or a split point naming no submodule (the
        message lists a few valid names).
    """
    if len(devices) != len(split_points) + 1:
        raise ValueError(f"{len(devices)} devices for {len(split_points) + 1} stages")
    check_split_points(model, split_points)
    example = torch.zeros((EXAMPLE_BATCH, 3, *input_hw), dtype=torch.float32)
    modules = split_model(model, split_points, example)
    return [TorchStage(module, device) for module, device in zip(modules, devices)]


def check_split_points(model: nn.Module, split_points: Sequence[str]) -> None:
    """Raise ValueError naming the first split point that is not a submodule of ``model``, with close names."""
    names = [name for name, _ in model.named_modules() if name]
    for point in split_points:
        if point not in names:
            near = difflib.get_close_matches(point, names, n=5) or names[:5]
            raise ValueError(f"split point {point!r} is not a submodule of the model; e.g. {', '.join(near)}")

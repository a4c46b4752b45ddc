"""Start-up check that an ONNX recognizer model fits its config: the image input ``input_hw`` describes, and the
embedding length its ``embedding`` head names (``head.dim``), so a drop-in model (e.g. a person or vehicle
re-identification network exported to ONNX) that does not fit fails with one line naming the file and the
expected shape, before any ROI.

Only fixed dimensions are compared; a symbolic one (a dynamic batch, height or width) fits anything here, and the
worker's warm-up micro-batch checks the embedding length it really gets (:func:`check_embedding_output`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import onnx


class ModelContractError(ValueError):
    """An ONNX recognizer model's input or output does not fit the recognizer config (one line: file, shapes)."""


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]


def check_onnx_contract(model: onnx.ModelProto, cfg: Any, path: str | Path) -> None:
    """Check ``model``'s one image input against ``cfg.input_hw`` and its first output against ``cfg.head.dim``.

    Args:
        model: the loaded ONNX model. cfg: the recognizer config (``input_hw``, ``head``). path: its file, for
            the message.

    Raises:
        ModelContractError: not one input of rank 4 with 3 channels, a fixed height or width other than
            ``input_hw``, or (``head.dim`` set) a fixed embedding length per crop other than ``dim``.
    """
    inits = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    height, width = cfg.input_hw
    expected = f"(N, 3, {height}, {width})"
    if len(inputs) != 1 or len(_dims(inputs[0])) != 4:
        shapes = [(i.name, _dims(i)) for i in inputs]
        raise ModelContractError(f"recognizer model {path}: inputs {shapes}, expected one image input {expected}")
    dims = _dims(inputs[0])
    if any(isinstance(got, int) and got != want for got, want in zip(dims[1:], (3, height, width))):
        raise ModelContractError(
            f"recognizer model {path}: input {inputs[0].name} {dims}, expected {expected} from input_hw "
            f"{[height, width]}: set input_hw to the model's input size"
        )
    dim = getattr(cfg.head, "dim", None)
    if dim is None or not model.graph.output:
        return
    out = _dims(model.graph.output[0])
    if len(out) >= 2 and all(isinstance(d, int) for d in out[1:]) and math.prod(out[1:]) != dim:
        raise ModelContractError(
            f"recognizer model {path}: output {model.graph.output[0].name} {out} is {math.prod(out[1:])} values per "
            f"crop, expected (N, {dim}) from head.dim {dim}"
        )


def check_embedding_output(shape: Sequence[int], dim: int | None) -> None:
    """Check the last stage's output shape (N, ...) of a warm-up micro-batch against ``head.dim``.

    Raises:
        ModelContractError: ``dim`` set and the values per crop differ from it.
    """
    if dim is not None and len(shape) >= 1 and math.prod(shape[1:]) != dim:
        raise ModelContractError(
            f"the recognizer outputs {list(shape)} ({math.prod(shape[1:])} values per crop), expected (N, {dim}) from "
            f"head.dim {dim}"
        )

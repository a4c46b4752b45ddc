"""The input/output contract between a detector type and an ONNX model, checked once at start-up.

A wrongly exported model otherwise fails late and obscurely (a reshape error on the first frame, or worse, boxes
that decode without error and are all wrong). :func:`check_contract` compares the session's one input and first
output with what the configured type expects and raises :class:`DetectorContractError` naming the model file,
what was expected and what was found, with a hint where the mistake is recognisable (a transposed YOLOv8 layout
configured as YOLOv5, a class count that does not match the class names).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from vcascade.core.runtime.startup import StartupError

FLOAT_TYPES = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16)}
"""ONNX Runtime input/output type strings accepted for detector tensors, and the numpy dtype fed / read."""

Dim = int | str | None
"""One ONNX Runtime shape entry: an int when fixed, a name (str) or None when dynamic."""


class DetectorContractError(ValueError, StartupError):
    """The model's inputs or outputs do not fit the configured detector type, input size or class names.

    Recovery: none at run time. The message names the model file, what was expected and what was found; fix the
    detector config (``type``, ``input_size``, ``class_names``) or re-export the model (docs/DETECTORS.md).
    """


@dataclass(frozen=True)
class OutputLayout:
    """The raw output a detector family decodes: rank 3, (B, *, *), one vector of ``extra + C`` values per box.

    Attributes:
        family: detector type name, e.g. ``"yolov5"``.
        text: the layout for messages, e.g. ``"[B, N, 5+C]"``.
        values_axis: axis (1 or 2) holding the ``extra + C`` values of one box; the other axis counts boxes.
        extra: values per box before the C class scores (4 box values, plus objectness when present).
        boxes: expected box count for ``input_size`` when the family fixes it (YOLOX anchors), else None.
    """

    family: str
    text: str
    values_axis: int
    extra: int
    boxes: int | None = None


@dataclass(frozen=True)
class InputSpec:
    """The model's image input, as checked.

    Attributes:
        name: input tensor name. output_name: the output decoded (the model's first).
        batch: fixed batch size, or None when the batch dimension is dynamic.
        dtype: numpy dtype the model takes (float32 or float16); frames are cast to it.
    """

    name: str
    output_name: str
    batch: int | None
    dtype: np.dtype


def check_contract(
    session: ort.InferenceSession, model_path: str | os.PathLike[str], layout: OutputLayout, input_size: int,
    num_classes: int,
) -> InputSpec:
    """Check a session against a family's layout, the configured square input size and class count.

    Input: exactly one, rank 4 (B, 3, S, S), float32 or float16, S == ``input_size`` where fixed.
    Output (the first): rank 3, float32 or float16, ``extra + num_classes`` values per box on
    ``layout.values_axis`` where fixed, ``layout.boxes`` boxes when given and fixed, batch equal to the input's.

    Returns:
        The :class:`InputSpec` to feed the model.

    Raises:
        DetectorContractError: any mismatch; the message names ``model_path``, the expectation and the finding.
    """
    inputs, outputs = session.get_inputs(), session.get_outputs()
    where = f"{os.fspath(model_path)} (type {layout.family}, input_size {input_size}, {num_classes} class names)"
    found = f"found inputs {_describe(inputs)}, outputs {_describe(outputs)}"
    if len(inputs) != 1 or not outputs:
        raise DetectorContractError(f"{where}: expected 1 image input and at least 1 output, {found}")
    image, raw = inputs[0], outputs[0]
    want_in = ("B", 3, input_size, input_size)
    if image.type not in FLOAT_TYPES or not _fits(image.shape, want_in):
        raise DetectorContractError(
            f"{where}: expected input float32 or float16 of shape {_text(want_in)} (B fixed or dynamic), {found}"
        )
    batch = image.shape[0] if isinstance(image.shape[0], int) else None
    _check_output(raw, layout, num_classes, batch, f"{where}: ", found)
    return InputSpec(image.name, raw.name, batch, FLOAT_TYPES[image.type])


def _check_output(
    raw: ort.NodeArg, layout: OutputLayout, num_classes: int, batch: int | None, where: str, found: str
) -> None:
    """Raise DetectorContractError unless ``raw`` has the layout's rank, dtype, values per box and box count."""
    values = layout.extra + num_classes
    want: list[Dim] = [batch if batch is not None else "B", "N", "N"]
    want[layout.values_axis] = values
    if layout.boxes is not None:
        want[3 - layout.values_axis] = layout.boxes
    expected = f"expected output {layout.text} float32 or float16 = {_text(want)}"
    if raw.type not in FLOAT_TYPES or len(raw.shape) != 3:
        raise DetectorContractError(f"{where}{expected}, {found}")
    if not _fits(raw.shape, want):
        raise DetectorContractError(f"{where}{expected}, {found}{_hint(raw.shape, layout, num_classes)}")


def check_output_array(raw: np.ndarray, layout: OutputLayout, num_classes: int, batch: int, model: str) -> None:
    """Check one run's output array (dynamic dimensions are only known now).

    Raises:
        DetectorContractError: ``raw`` is not (batch, ...) rank 3 with ``extra + num_classes`` values per box.
    """
    want: list[Dim] = [batch, "N", "N"]
    want[layout.values_axis] = layout.extra + num_classes
    if raw.ndim != 3 or not _fits(list(raw.shape), want):
        raise DetectorContractError(
            f"{model} (type {layout.family}, {num_classes} class names): expected output {layout.text} = "
            f"{_text(want)}, the model returned shape {tuple(raw.shape)}{_hint(list(raw.shape), layout, num_classes)}"
        )


def _hint(shape: Sequence[Dim], layout: OutputLayout, num_classes: int) -> str:
    """A likely cause for a mismatching output shape, or ''."""
    if len(shape) != 3:
        return ""
    values = shape[layout.values_axis]
    other = shape[3 - layout.values_axis]
    if isinstance(other, int) and other in (4 + num_classes, 5 + num_classes) and other != values:
        kind = "yolov8" if other == 4 + num_classes and layout.values_axis == 2 else "yolov5 or yolox"
        return f" (the values-per-box axis looks transposed: is this a {kind} model? set the detector's `type`)"
    if isinstance(values, int) and values > layout.extra:
        return (
            f" (the model has {values} values per box = {layout.extra} + {values - layout.extra} classes: "
            f"set `class_names` to its {values - layout.extra} names, or check `type`)"
        )
    return ""


def _fits(shape: Sequence[Dim], want: Sequence[Dim]) -> bool:
    """True when ranks agree and every dimension fixed on both sides is equal (str/None = dynamic)."""
    return len(shape) == len(want) and all(
        not isinstance(d, int) or not isinstance(w, int) or d == w for d, w in zip(shape, want)
    )


def _text(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _describe(args: Sequence[ort.NodeArg]) -> list[tuple[str, list[Dim], str]]:
    return [(a.name, a.shape, a.type) for a in args]

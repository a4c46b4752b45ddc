"""An int8 copy of a YOLOX detector, made with ONNX Runtime's post-training static quantization (issue 32).

:func:`quantize_yolox` turns the fp32 file into ``<stem>.int8.onnx`` (:func:`int8_path`) beside it, calibrated on
frames of the user's own footage; ``vcascade quantize`` runs it, and an edge with ``detector.precision: int8``
opens that file (:func:`vcascade.edge.detection.model_file.ensure_detector_model`). The steps are ONNX Runtime's
documented recipe (onnxruntime.ai, "Quantize ONNX models"):

1. the model is converted to opset 13 when older (``onnx.version_converter``): per-channel ``DequantizeLinear``
   (its ``axis``) needs opset 13;
2. ``quant_pre_process``: shape inference and graph optimisation, as ONNX Runtime advises before quantizing;
3. ``quantize_static`` in the QDQ format: weights int8 per output channel, activations uint8 per tensor, ranges
   from the calibration frames (min/max). Two parts are kept in float:

   * the prediction head: the convolutions giving the box offsets, objectness and class scores and everything
     after them (the per-level ``Concat`` puts the box offsets, tens of pixels, beside scores in 0..1, so one
     shared uint8 scale would erase the scores) (:func:`head_nodes`);
   * the early layers: every layer finer than ``float_stride`` (default :data:`FLOAT_STRIDE`, 32: the Focus
     slices and every stage before the last of YOLOX-nano's backbone and neck) (:func:`fine_nodes`). Their
     activations have channels whose ranges lie hundreds of times apart (0.23 to 130 over the sample footage
     after the first convolution), which one uint8 scale per tensor cannot carry (Nagel et al., "Data-Free
     Quantization Through Weight Equalization and Bias Correction", ICCV 2019, section 3). Quantized from the
     input on, the copy found 0.39 of the fp32 boxes; with the layers finer than stride 8, 16 and 32 in float,
     0.93, 0.95 and 0.95 (precision 0.87, 0.91 and 0.96), at 1.16x, 1.10x and 1.07x the fp32 speed
     (docs/BENCHMARKS.md, "An int8 detector").
     Large, thin maps also cost more to quantize and dequantize than their int8 convolutions save.

The int8 model keeps the fp32 model's float32 input and output, so the same detector adapter opens it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from vcascade.edge.detection.model_file import int8_path  # noqa: F401  (re-exported: where the copy lives)

QDQ_MIN_OPSET = 13
"""Lowest opset with per-channel ``QuantizeLinear``/``DequantizeLinear`` (their ``axis`` attribute)."""


class _Frames(CalibrationDataReader):
    """Feeds the calibration tensors, one (1, 3, S, S) float32 batch at a time, under the model's input name."""

    def __init__(self, input_name: str, tensors: Iterable[np.ndarray]) -> None:
        self.input_name = input_name
        self._it: Iterator[np.ndarray] = iter(tensors)

    def get_next(self) -> dict[str, np.ndarray] | None:
        tensor = next(self._it, None)
        return None if tensor is None else {self.input_name: tensor[None].astype(np.float32, copy=False)}


def head_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes of a YOLOX graph's prediction head kept in float (module docstring): each per-level
    ``Concat`` that feeds a ``Reshape``, the convolutions (through an optional ``Sigmoid``) feeding it, and every
    node downstream of those ``Concat``\\ s.

    Raises:
        ValueError: no such ``Concat`` (not a YOLOX export).
    """
    producer = {out: node for node in model.graph.node for out in node.output}
    reshaped = {node.input[0] for node in model.graph.node if node.op_type == "Reshape"}
    levels = [node for node in model.graph.node if node.op_type == "Concat" and node.output[0] in reshaped]
    if not levels:
        raise ValueError("no per-level output Concat found: not a YOLOX model export")
    kept = {node.name for node in levels}
    for node in levels:
        for name in node.input:
            source = producer.get(name)
            if source is not None and source.op_type == "Sigmoid":
                kept.add(source.name)
                source = producer.get(source.input[0])
            if source is not None and source.op_type == "Conv":
                kept.add(source.name)
    downstream = {out for node in levels for out in node.output}
    for node in model.graph.node:  # nodes are topologically sorted (ONNX requires it)
        if any(name in downstream for name in node.input):
            kept.add(node.name)
            downstream.update(node.output)
    return sorted(kept)


FLOAT_STRIDE = 32
"""Layers whose outputs are finer than this stride (input px per output cell) stay in float (module docstring)."""


def fine_nodes(model: onnx.ModelProto, stride: int = FLOAT_STRIDE) -> list[str]:
    """Names of the nodes whose every output is a feature map finer than ``stride``: (B, C, H, W) with
    H > input height / ``stride``, by the shapes ``quant_pre_process`` inferred (``graph.value_info``). Nodes of
    unknown output shape are not among them.

    Raises:
        ValueError: the model's input height is not fixed.
    """
    height = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    if not height:
        raise ValueError("the model's input height is not fixed: cannot tell its layers' strides")
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    fine = [n.name for n in model.graph.node
            if n.output and all(len(shapes.get(o, ())) == 4 and shapes[o][2] > height // stride for o in n.output)]
    return sorted(fine)


def quantize_yolox(fp32_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                   calibration: Iterable[np.ndarray], float_stride: int = FLOAT_STRIDE) -> Path:  # fmt: skip
    """Write an int8 copy of a YOLOX model (module docstring).

    Args:
        fp32_path: the fp32 ONNX model.
        out_path: the int8 model to write (replaced atomically: written beside it, then renamed).
        calibration: preprocessed frames, each (3, S, S) float32 as the detector feeds them
            (:meth:`vcascade.edge.detection.yolox.YoloxDetector.preprocess`); a few dozen from the camera's footage.
        float_stride: the layers finer than this stride stay in float (:func:`fine_nodes`); 1 quantizes them all.

    Returns:
        ``out_path``.

    Raises:
        ValueError: not a YOLOX export, no calibration frame, or ``float_stride`` < 1.
        onnx.checker.ValidationError, onnxruntime errors: the model cannot be converted.
    """
    tensors = list(calibration)
    if not tensors:
        raise ValueError("no calibration frame")
    if float_stride < 1:
        raise ValueError(f"float_stride must be >= 1, got {float_stride}")
    out = Path(out_path)
    with tempfile.TemporaryDirectory(prefix="vcascade-quantize-") as tmp:
        model = onnx.load(str(fp32_path))
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), QDQ_MIN_OPSET)
        if opset < QDQ_MIN_OPSET:
            model = version_converter.convert_version(model, QDQ_MIN_OPSET)
        converted, prepared = Path(tmp) / "opset.onnx", Path(tmp) / "prepared.onnx"
        onnx.save(model, str(converted))
        quant_pre_process(str(converted), str(prepared))
        prepared_model = onnx.load(str(prepared))
        input_name = prepared_model.graph.input[0].name
        partial = out.with_name(out.name + ".partial")
        quantize_static(
            str(prepared), str(partial), _Frames(input_name, tensors), quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=head_nodes(prepared_model) + fine_nodes(prepared_model, float_stride),
        )
        os.replace(partial, out)
    return out

"""An int8 copy of a YOLOX detector, made with ONNX Runtime's post-training static quantization (issue 32).

:func:`quantize_yolox` turns the fp32 file into ``<stem>.int8.onnx`` (:func:`int8_path`) beside it, calibrated on
frames of the user's own footage; ``vcascade quantize`` runs it, and an edge with ``detector.precision: int8``
opens that file (:func:`vcascade.edge.detection.model_file.ensure_detector_model`). The steps are ONNX Runtime's
documented recipe (onnxruntime.ai, "Quantize ONNX models"):

1. the model is converted to opset 13 when older (``onnx.version_converter``): per-channel ``DequantizeLinear``
   (its ``axis``) needs opset 13;
2. ``quant_pre_process``: shape inference and graph optimisation, as ONNX Runtime advises before quantizing;
3. ``quantize_static`` in the QDQ format: weights int8 per output channel, activations uint8 per tensor, ranges
   from the calibration frames (min/max). The prediction head is kept in float: the convolutions giving the
   box offsets, objectness and class scores and everything after them (the per-level ``Concat`` puts the box
   offsets, tens of pixels, beside scores in 0..1, so one shared uint8 scale would erase the scores).

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


def quantize_yolox(fp32_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                   calibration: Iterable[np.ndarray]) -> Path:  # fmt: skip
    """Write an int8 copy of a YOLOX model (module docstring).

    Args:
        fp32_path: the fp32 ONNX model.
        out_path: the int8 model to write (replaced atomically: written beside it, then renamed).
        calibration: preprocessed frames, each (3, S, S) float32 as the detector feeds them
            (:meth:`vcascade.edge.detection.yolox.YoloxDetector.preprocess`); a few dozen from the camera's footage.

    Returns:
        ``out_path``.

    Raises:
        ValueError: not a YOLOX export, or no calibration frame.
        onnx.checker.ValidationError, onnxruntime errors: the model cannot be converted.
    """
    tensors = list(calibration)
    if not tensors:
        raise ValueError("no calibration frame")
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
            calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=head_nodes(prepared_model),
        )
        os.replace(partial, out)
    return out

"""A YOLOX model at another square input size: the same weights, the input's height and width set to the size.

The YOLOX exports (``tools/export_onnx.py`` of Megvii-BaseDetection/YOLOX) are fully convolutional: their two
``Resize`` nodes upsample by scales (x2) and their head's ``Reshape``\\ s flatten with ``-1``, so only the declared
input and output shapes fix the size they were exported at. :func:`yolox_at_input_size` rewrites those two
declarations (input ``(B, 3, S, S)``, output ``(B, A, 85)`` with A = :func:`~edge.detection.yolox.expected_anchors`)
and checks the result with ONNX's shape inference. A smaller input detects faster (the cost grows with S^2) and
loses the smallest objects first (docs/DETECTORS.md, "A smaller input"). :func:`sized_model` is what the edge
calls at start-up: it makes that copy once, beside the model (or in the user cache when that folder is read-only),
when the detector's ``input_size`` differs from the size the file declares.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx

from vcascade.core.runtime.models import user_cache_dir, writable_dir
from vcascade.edge.detection.yolox import STRIDES, expected_anchors

log = logging.getLogger(__name__)


def yolox_at_input_size(model_path: str | os.PathLike[str], out_path: str | os.PathLike[str], size: int) -> Path:
    """Write a copy of a YOLOX ONNX model whose input is ``size`` x ``size`` px (module docstring).

    Args:
        model_path: a YOLOX export, input (B, 3, S, S) float32.
        out_path: where to write the copy (replaced atomically: written beside it, then renamed).
        size: the new square input side, px; a multiple of the largest stride (32).

    Returns:
        ``out_path``.

    Raises:
        ValueError: ``size`` is not a positive multiple of 32, or the model does not have one rank-4 input and a
            rank-3 first output.
        onnx.shape_inference.InferenceError: the graph does not infer at the new size (not size-agnostic).
    """
    if size <= 0 or size % max(STRIDES):
        raise ValueError(f"input size must be a positive multiple of {max(STRIDES)}, got {size}")
    model = onnx.load(str(model_path))
    dims_in = model.graph.input[0].type.tensor_type.shape.dim
    dims_out = model.graph.output[0].type.tensor_type.shape.dim
    if len(dims_in) != 4 or len(dims_out) != 3:
        raise ValueError(f"{model_path}: expected input (B, 3, S, S) and output (B, A, 5+C), got ranks "
                         f"{len(dims_in)} and {len(dims_out)}")  # fmt: skip
    dims_in[2].dim_value = dims_in[3].dim_value = size
    dims_out[1].dim_value = expected_anchors(size)
    del model.graph.value_info[:]  # intermediate shapes of the old size; inferred afresh below
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    out = Path(out_path)
    partial = out.with_name(out.name + ".partial")
    onnx.save(model, str(partial))
    os.replace(partial, out)
    return out


def declared_input_size(model_path: str | os.PathLike[str]) -> int | None:
    """The square input side (px) a model file declares on its first input's last axis, or None when that axis
    is symbolic (a dynamic-size export), the input is not rank 4, or the file is not an ONNX model (opening it
    with ONNX Runtime then says why).
    """
    try:
        graph = onnx.load(str(model_path), load_external_data=False).graph
        dims = graph.input[0].type.tensor_type.shape.dim
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and others: not a model; the session load names it
        return None
    return (dims[3].dim_value or None) if len(dims) == 4 else None


def sized_model(model_path: str | os.PathLike[str], size: int) -> Path:
    """The model to open for a detector whose ``input_size`` is ``size``: ``model_path`` itself when it declares
    that size (or a symbolic one), else its copy at ``size`` (:func:`yolox_at_input_size`), ``<stem>.<size>.onnx``
    beside it, or in the user cache when that folder is not writable; made once and made again only when the
    model file is newer than the copy.

    Raises:
        ValueError: ``size`` is not a positive multiple of 32, or the model is not a YOLOX export.
        onnx.shape_inference.InferenceError: the model does not infer at ``size``.
        OSError: neither folder can be written.
    """
    source = Path(model_path)
    if declared_input_size(source) in (None, size):
        return source
    name = f"{source.name.removesuffix('.onnx')}.{size}.onnx"
    folder = source.parent if writable_dir(source.parent) else user_cache_dir()
    copy = folder / name
    if not copy.is_file() or copy.stat().st_mtime < source.stat().st_mtime:
        folder.mkdir(parents=True, exist_ok=True)
        yolox_at_input_size(source, copy, size)
        log.info("wrote %s: %s at input size %d (detector.input_size)", copy, source, size)
    return copy

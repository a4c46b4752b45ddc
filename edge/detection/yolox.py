"""YOLOX (Megvii-BaseDetection/YOLOX, Apache-2.0): top-left letterbox, grid decoding of ``[B, A, 5+C]``.

Pre- and post-processing follow the YOLOX reference: ``yolox/data/data_augment.py`` ``preproc``
(aspect-preserving resize into the top-left corner of a canvas filled with 114, BGR, 0..255, not normalised) and
``yolox/utils/demo_utils.py`` ``demo_postprocess`` (grid decoding) and ``multiclass_nms_class_agnostic`` (best
class per anchor, score = objectness x class score). The official ONNX export (``tools/export_onnx.py`` with
``decode_in_inference=False``) has a fixed batch of 1; dynamic-batch exports (``--dynamic``) are batched.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from vcascade.core.schema.base import family_tag
from vcascade.core.schema.detector import YoloxDetectorConfig
from vcascade.edge.detection.base import OnnxDetector
from vcascade.edge.detection.contract import OutputLayout, check_contract
from vcascade.edge.detection.letterbox import Placement, letterbox_top_left

STRIDES: tuple[int, ...] = (8, 16, 32)
"""YOLOX head strides, px per grid cell, in output order (``demo_postprocess``)."""

NUM_CLASSES = 80
"""COCO classes of the released YOLOX models; the output row per anchor is [cx, cy, log w, log h, obj, 80 scores]."""


def expected_anchors(size: int, strides: Sequence[int] = STRIDES) -> int:
    """Anchor points of a YOLOX head for a ``size`` x ``size`` input: sum over strides of (size // s)^2."""
    return sum((size // s) ** 2 for s in strides)


def yolox_layout(input_size: int, strides: Sequence[int] = STRIDES) -> OutputLayout:
    """The YOLOX output layout for a square input: ``[B, A, 5+C]`` with A = :func:`expected_anchors`."""
    boxes = expected_anchors(input_size, strides)
    return OutputLayout(family_tag(YoloxDetectorConfig), "[B, A, 5+C]", values_axis=2, extra=5, boxes=boxes)


@functools.lru_cache(maxsize=8)
def _grid(size: int, strides: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets (A, 2) float32 (x, y) and strides (A, 1) float32, row-major per stride, smallest stride first.

    Same layout as ``demo_postprocess``: ``meshgrid(arange(w), arange(h))`` stacked (x, y), reshaped to (-1, 2).
    """
    cells, cell_strides = [], []
    for s in strides:
        n = size // s
        xv, yv = np.meshgrid(np.arange(n), np.arange(n))
        cells.append(np.stack((xv, yv), axis=2).reshape(-1, 2))
        cell_strides.append(np.full((n * n, 1), s))
    grid = np.concatenate(cells).astype(np.float32)
    stride = np.concatenate(cell_strides).astype(np.float32)
    grid.flags.writeable = stride.flags.writeable = False
    return grid, stride


def decode_outputs(
    raw: np.ndarray, size: int, strides: Sequence[int] = STRIDES
) -> tuple[np.ndarray, np.ndarray]:
    """Turn YOLOX head output into boxes and per-class scores (YOLOX ``demo_postprocess``).

    Per anchor at grid cell (gx, gy) of stride s: x = (cx + gx) * s, y = (cy + gy) * s, w = exp(log w) * s,
    h = exp(log h) * s; score[c] = objectness * class_score[c] (the exported model already applied the sigmoids).

    Args:
        raw: (A, 5 + C) float32, one row per anchor: [cx, cy, log w, log h, objectness, C class scores].
        size: square network input side, px.
        strides: head strides in output order.

    Returns:
        xyxy: (A, 4) float32 boxes in canvas px (x1, y1, x2, y2).
        scores: (A, C) float32, objectness x class score.

    Raises:
        ValueError: ``raw`` is not 2-D with more than 5 columns, or A != sum((size // s)^2).
    """
    grid, stride = _grid(size, tuple(strides))
    if raw.ndim != 2 or raw.shape[1] <= 5 or raw.shape[0] != len(grid):
        raise ValueError(f"raw output must have shape ({len(grid)}, 5 + classes) for size {size}, got {raw.shape}")
    raw = raw.astype(np.float32, copy=False)
    center = (raw[:, 0:2] + grid) * stride
    with np.errstate(over="ignore"):  # absurd log-sizes give inf boxes, removed by the caller
        half = np.exp(raw[:, 2:4]) * stride / 2
    xyxy = np.concatenate((center - half, center + half), axis=1)
    scores = raw[:, 4:5] * raw[:, 5:]
    return xyxy, scores


def letterbox(frame_bgr: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    """YOLOX ``preproc`` as a network input: (1, 3, size, size) float32 BGR 0..255 tensor and the scale r.

    r = min(size / H, size / W) maps frame px to canvas px; the frame lies in the top-left corner, the rest is 114.
    See :func:`vcascade.edge.detection.letterbox.letterbox_top_left`.

    Raises:
        ValueError: not uint8, an unsupported shape, or an empty frame.
    """
    canvas, placement = letterbox_top_left(frame_bgr, size)
    return np.ascontiguousarray(canvas.transpose(2, 0, 1)[None], dtype=np.float32), placement.scale


def check_yolox_signature(
    session: ort.InferenceSession, input_size: int, strides: Sequence[int] = STRIDES, model_path: str = "model"
) -> None:
    """Check that a session is a COCO YOLOX detector for ``input_size``: input (B, 3, S, S), output (B, A, 85).

    Raises:
        DetectorContractError (a ValueError): naming what was expected and what the model has.
    """
    check_contract(session, model_path, yolox_layout(input_size, strides), input_size, NUM_CLASSES)


class YoloxDetector(OnnxDetector):
    """A YOLOX ONNX model: ``detector(frame) -> Detections``, ``detector.detect_batch(frames)``.

    Takes the arguments of :class:`~edge.detection.base.OnnxDetector`; ``input_size`` defaults to 416
    (YOLOX-Nano/Tiny; 640 for S and larger). See ``shared/models/README.md`` for the model contract.
    """

    def __init__(self, model_path: str | os.PathLike[str], *, input_size: int = 416, **kwargs: Any) -> None:
        self.layout = yolox_layout(input_size)
        super().__init__(model_path, input_size=input_size, **kwargs)

    def preprocess(self, frame: np.ndarray) -> tuple[np.ndarray, Placement]:
        """YOLOX ``preproc``: top-left letterbox, pad 114, BGR, 0..255 -> (3, S, S) float32."""
        canvas, placement = letterbox_top_left(frame, self.input_size)
        return canvas.transpose(2, 0, 1).astype(np.float32), placement

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A, 5+C) raw -> grid-decoded (A, 4) canvas-px xyxy and (A, C) objectness x class scores."""
        return decode_outputs(raw, self.input_size)

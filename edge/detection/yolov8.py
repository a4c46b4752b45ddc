"""YOLOv8 and YOLO11 (Ultralytics, ``yolo export format=onnx``): output ``[B, 4+C, N]``, no objectness.

Each of the N columns is [cx, cy, w, h, C class scores], box in network-input px, sigmoids applied (Ultralytics
``ultralytics/nn/modules/head.py`` ``Detect``). The best class score is the confidence, as in Ultralytics
``ultralytics/utils/ops.py`` ``non_max_suppression`` (``prediction.transpose(-1, -2)``, ``cls.max(1)``,
``multi_label=False``, ``max_det=300``). Exports made with ``nms=True`` (output ``[B, 300, 6]``) are not this
layout and are refused by the contract check. Preprocessing: :mod:`vcascade.edge.detection.ultralytics`.
"""

from __future__ import annotations

import numpy as np

from vcascade.core.schema.base import family_tag
from vcascade.core.schema.detector import Yolov8DetectorConfig
from vcascade.edge.detection.contract import OutputLayout
from vcascade.edge.detection.nms import xywh_to_xyxy
from vcascade.edge.detection.ultralytics import UltralyticsDetector

LAYOUT = OutputLayout(family_tag(Yolov8DetectorConfig), "[B, 4+C, N]", values_axis=1, extra=4)


def decode_yolov8(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One image's YOLOv8/YOLO11 output -> boxes and per-class scores.

    Args:
        raw: (4 + C, N) float32 columns [cx, cy, w, h, C class scores], px of the network input.

    Returns:
        xyxy: (N, 4) float32 canvas px. scores: (N, C) float32 class scores.

    Raises:
        ValueError: ``raw`` is not 2-D with more than 4 rows.
    """
    if raw.ndim != 2 or raw.shape[0] <= 4:
        raise ValueError(f"YOLOv8 output must have shape (4 + classes, N), got {raw.shape}")
    rows = raw.astype(np.float32, copy=False).T
    return xywh_to_xyxy(rows[:, :4]), np.ascontiguousarray(rows[:, 4:])


class Yolov8Detector(UltralyticsDetector):
    """A YOLOv8 or YOLO11 ONNX model (fixed or dynamic batch, float32 or float16 input).

    Takes the arguments of :class:`~edge.detection.base.OnnxDetector` (``input_size`` default 640).
    """

    layout = LAYOUT

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(4+C, N) raw -> (N, 4) canvas-px xyxy and (N, C) class scores."""
        return decode_yolov8(raw)

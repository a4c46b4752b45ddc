"""YOLOv5 (Ultralytics, ``export.py --include onnx``): output ``[B, N, 5+C]`` with objectness.

Each of the N rows is [cx, cy, w, h, objectness, C class scores], box in network-input px, sigmoids applied
(YOLOv5 ``models/yolo.py`` ``Detect.forward`` in export mode). Score = objectness x class score and the best
class per row is kept, as in YOLOv5 ``utils/general.py`` ``non_max_suppression`` (``x[:, 5:] *= x[:, 4:5]``,
``multi_label=False``, ``max_det=300``). Preprocessing: :mod:`vcascade.edge.detection.ultralytics`.
"""

from __future__ import annotations

import numpy as np

from vcascade.core.schema.base import family_tag
from vcascade.core.schema.detector import Yolov5DetectorConfig
from vcascade.edge.detection.contract import OutputLayout
from vcascade.edge.detection.nms import xywh_to_xyxy
from vcascade.edge.detection.ultralytics import UltralyticsDetector

LAYOUT = OutputLayout(family_tag(Yolov5DetectorConfig), "[B, N, 5+C]", values_axis=2, extra=5)


def decode_yolov5(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One image's YOLOv5 output -> boxes and per-class scores.

    Args:
        raw: (N, 5 + C) float32 rows [cx, cy, w, h, objectness, C class scores], px of the network input.

    Returns:
        xyxy: (N, 4) float32 canvas px. scores: (N, C) float32 objectness x class score.

    Raises:
        ValueError: ``raw`` is not 2-D with more than 5 columns.
    """
    if raw.ndim != 2 or raw.shape[1] <= 5:
        raise ValueError(f"YOLOv5 output must have shape (N, 5 + classes), got {raw.shape}")
    raw = raw.astype(np.float32, copy=False)
    return xywh_to_xyxy(raw[:, :4]), raw[:, 4:5] * raw[:, 5:]


class Yolov5Detector(UltralyticsDetector):
    """A YOLOv5 ONNX model (fixed or dynamic batch, float32 or float16 input).

    Takes the arguments of :class:`~edge.detection.base.OnnxDetector` (``input_size`` default 640).
    """

    layout = LAYOUT

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 5+C) raw -> (N, 4) canvas-px xyxy and (N, C) objectness x class scores."""
        return decode_yolov5(raw)

"""Ultralytics YOLO preprocessing: centred letterbox, pad 114, BGR -> RGB, 0..1 (YOLOv5, YOLOv8, YOLO11).

Source: Ultralytics ``ultralytics/engine/predictor.py`` ``BasePredictor.preprocess`` (``LetterBox`` with
``auto=False`` for exported models, then ``im[..., ::-1]`` BGR to RGB, HWC to CHW, ``/ 255``) and YOLOv5
``detect.py`` (``letterbox(..., auto=False)`` for non-PyTorch backends, ``[::-1]``, ``/= 255``).
"""

from __future__ import annotations

import numpy as np

from vcascade.edge.detection.base import OnnxDetector
from vcascade.edge.detection.letterbox import Placement, letterbox_centered


def ultralytics_preprocess(frame: np.ndarray, size: int) -> tuple[np.ndarray, Placement]:
    """Frame -> (3, size, size) float32 RGB tensor with values 0..1 (pad 114/255), and its :class:`Placement`.

    Args:
        frame: (H, W, 3) uint8 BGR (gray and BGRA accepted).
        size: square network input side, px.

    Raises:
        ValueError: unsupported frame (see :func:`vcascade.edge.detection.letterbox.to_bgr`).
    """
    canvas, placement = letterbox_centered(frame, size)
    tensor = canvas[:, :, ::-1].transpose(2, 0, 1).astype(np.float32)
    tensor /= np.float32(255)
    return tensor, placement


class UltralyticsDetector(OnnxDetector):
    """Base of the Ultralytics families (YOLOv5, YOLOv8, YOLO11): their preprocessing and ``max_det``.

    Subclasses set ``layout`` and implement ``decode``.
    """

    max_detections = 300  # Ultralytics / YOLOv5 non_max_suppression max_det

    def preprocess(self, frame: np.ndarray) -> tuple[np.ndarray, Placement]:
        """Ultralytics preprocessing: centred letterbox, pad 114, RGB, 0..1 -> (3, S, S) float32."""
        return ultralytics_preprocess(frame, self.input_size)

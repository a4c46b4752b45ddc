"""Compatibility module: the YOLOX detector and its helpers now live in :mod:`edge.detectors`.

Kept so that ``from edge.detector import YoloxDetector, letterbox, decode_outputs, batched_nms`` (and
:func:`check_yolox_signature`, used by :mod:`vcascade.models` to verify a download) keep working.
"""

from edge.detectors import Detector, DetectorContractError, build_detector
from edge.detectors.letterbox import PAD_VALUE
from edge.detectors.nms import batched_nms
from edge.detectors.yolox import (
    NUM_CLASSES,
    STRIDES,
    YoloxDetector,
    check_yolox_signature,
    decode_outputs,
    expected_anchors,
    letterbox,
)

__all__ = [
    "NUM_CLASSES", "PAD_VALUE", "STRIDES", "Detector", "DetectorContractError", "YoloxDetector", "batched_nms",
    "build_detector", "check_yolox_signature", "decode_outputs", "expected_anchors", "letterbox",
]

"""The edge: camera readers, YOLOX detection, crops, the broker link with its accounting, and sinks.

Follow one ROI from :func:`edge.node.run_edge`: :mod:`edge.source` -> :mod:`edge.frames` ->
:mod:`edge.detector` -> :mod:`edge.roi` -> :mod:`edge.link` (-> broker -> worker ->) :mod:`edge.account`
-> :mod:`edge.sinks`.
"""

from edge.account import PendingRoi, close_account
from edge.detector import YoloxDetector, batched_nms, decode_outputs, letterbox
from edge.frames import Frame, FrameSlots
from edge.link import BrokerLink
from edge.node import run_edge
from edge.roi import Crop, crop_box, encode_jpeg, select_crops
from edge.source import CameraReader, SourceError, open_capture

__all__ = [
    "BrokerLink", "CameraReader", "Crop", "Frame", "FrameSlots", "PendingRoi", "SourceError", "YoloxDetector",
    "batched_nms", "close_account", "crop_box", "decode_outputs", "encode_jpeg", "letterbox", "open_capture",
    "run_edge", "select_crops",
]

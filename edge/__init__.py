"""The edge: camera readers, detection, tracking and ROI policy, crops, the broker link with its accounting,
and sinks.

Follow one ROI from :func:`edge.node.run_edge`: :mod:`edge.source` (camera supervisor, capture sessions,
:mod:`edge.camera_state`) -> :mod:`edge.frames` -> :mod:`edge.detectors` -> :mod:`edge.tracking` ->
:mod:`edge.roi_policy` (:mod:`edge.routing`) -> :mod:`edge.roi` -> :mod:`edge.link` (-> broker -> worker ->) :mod:`edge.account`
-> :mod:`edge.sinks` (and :mod:`edge.identity_cache` for later detections of the same track).
"""

from edge.account import PendingRoi, close_account
from edge.detectors import (
    DetectorContractError,
    OnnxDetector,
    Yolov5Detector,
    Yolov8Detector,
    YoloxDetector,
    build_detector,
)
from edge.frames import Frame, FrameSlots
from edge.identity_cache import IdentityCache
from edge.link import BrokerLink
from edge.node import EdgeNode, run_edge
from edge.roi import Crop, crop_box, encode_jpeg, select_crops
from edge.roi_policy import RoiPolicy
from edge.routing import ClassRouter
from edge.source import CameraReader, SourceError, open_capture
from edge.tracking import CameraTracker

__all__ = [
    "BrokerLink", "CameraReader", "CameraTracker", "ClassRouter", "Crop", "DetectorContractError", "EdgeNode", "Frame",
    "FrameSlots", "IdentityCache", "OnnxDetector", "PendingRoi", "RoiPolicy", "SourceError", "Yolov5Detector",
    "Yolov8Detector", "YoloxDetector", "build_detector", "close_account", "crop_box", "encode_jpeg",
    "open_capture", "run_edge", "select_crops",
]

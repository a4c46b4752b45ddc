"""The edge: camera readers, detection, tracking and ROI policy, crops, the broker link with its accounting,
and sinks.

Follow one ROI from :func:`vcascade.edge.node.run_edge`: :mod:`vcascade.edge.source` (camera supervisor, capture sessions,
:mod:`vcascade.edge.camera_state`; decoding with PyAV in :mod:`vcascade.edge.av_reader`, fault reasons in
:mod:`vcascade.edge.camera_faults`, FFmpeg's log lines in :mod:`vcascade.edge.ffmpeg_log`, one-shot checks in
:mod:`vcascade.edge.probe`) -> :mod:`vcascade.edge.frames` -> :mod:`vcascade.edge.detectors` -> :mod:`vcascade.edge.tracking` ->
:mod:`vcascade.edge.roi_policy` (:mod:`vcascade.edge.routing`) -> :mod:`vcascade.edge.roi_selection` -> :mod:`vcascade.edge.roi` -> :mod:`vcascade.edge.link` (-> broker -> worker ->) :mod:`vcascade.edge.account`
-> :mod:`vcascade.edge.sinks` (and :mod:`vcascade.edge.identity_cache` for later detections of the same track).
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "PendingRoi": ".account",
    "close_account": ".account",
    "DetectorContractError": ".detectors",
    "OnnxDetector": ".detectors",
    "Yolov5Detector": ".detectors",
    "Yolov8Detector": ".detectors",
    "YoloxDetector": ".detectors",
    "build_detector": ".detectors",
    "Frame": ".frames",
    "FrameSlots": ".frames",
    "IdentityCache": ".identity_cache",
    "BrokerLink": ".link",
    "CameraTelemetry": ".metrics",
    "EdgeTelemetry": ".metrics",
    "EdgeNode": ".node",
    "run_edge": ".node",
    "crop_pixels": ".roi",
    "encode_jpeg": ".roi",
    "roi_header": ".roi",
    "RoiPolicy": ".roi_policy",
    "RoiSelection": ".roi_selection",
    "crop_boxes": ".roi_selection",
    "ClassRouter": ".routing",
    "CameraReader": ".source",
    "SourceError": ".source",
    "open_source": ".source",
    "CameraProbe": ".probe",
    "probe_camera": ".probe",
    "CameraTracker": ".tracking",
})

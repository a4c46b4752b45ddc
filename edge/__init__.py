"""The edge: camera readers, detection, tracking and ROI policy, crops, the broker link with its accounting,
and sinks.

Follow one ROI from :func:`vcascade.edge.process.run_edge`: :mod:`vcascade.edge.capture.source` (camera supervisor, capture sessions,
:mod:`vcascade.edge.capture.state`; decoding with PyAV in :mod:`vcascade.edge.capture.av_reader`, fault reasons in
:mod:`vcascade.edge.capture.faults`, FFmpeg's log lines in :mod:`vcascade.edge.capture.ffmpeg_log`, one-shot checks in
:mod:`vcascade.edge.capture.probe`) -> :mod:`vcascade.edge.capture.frames` -> :mod:`vcascade.edge.detection` -> :mod:`vcascade.edge.selection.tracking` ->
:mod:`vcascade.edge.selection.roi_policy` (with its routes) -> :mod:`vcascade.edge.selection.roi_selection` ->
:mod:`vcascade.edge.privacy.redaction` -> :mod:`vcascade.edge.selection.roi` -> :mod:`vcascade.edge.link.broker_link` (-> broker -> worker ->) :mod:`vcascade.edge.link.state`
-> :mod:`vcascade.edge.way_back` (:mod:`vcascade.edge.selection.identity_cache` for later detections of the same track,
:mod:`vcascade.edge.analytics.events`, :mod:`vcascade.edge.preview.hub`) -> :mod:`vcascade.edge.sinks.lines` -> :mod:`vcascade.edge.sinks.queue`.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "PendingRoi": ".link.state",
    "close_account": ".link.state",
    "DetectorContractError": ".detection",
    "OnnxDetector": ".detection",
    "Yolov5Detector": ".detection",
    "Yolov8Detector": ".detection",
    "YoloxDetector": ".detection",
    "build_detector": ".detection",
    "Frame": ".capture.frames",
    "FrameSlots": ".capture.frames",
    "IdentityCache": ".selection.identity_cache",
    "BrokerLink": ".link.broker_link",
    "CameraTelemetry": ".metrics",
    "EdgeTelemetry": ".metrics",
    "EdgeNode": ".node",
    "EdgeProcess": ".process",
    "run_edge": ".process",
    "WayBack": ".way_back",
    "crop_pixels": ".selection.roi",
    "encode_jpeg": ".selection.roi",
    "roi_header": ".selection.roi",
    "RoiPolicy": ".selection.roi_policy",
    "RoiSelection": ".selection.roi_selection",
    "crop_boxes": ".selection.roi_selection",
    "ClassRouter": ".selection.roi_policy",
    "CameraReader": ".capture.source",
    "SourceError": ".capture.source",
    "open_source": ".capture.source",
    "CameraProbe": ".capture.probe",
    "probe_camera": ".capture.probe",
    "CameraTracker": ".selection.tracking",
    "CameraRedaction": ".privacy.redaction",
    "RedactedFrame": ".privacy.redaction",
    "RedactedImage": ".privacy.redaction",
    "require_redacted": ".privacy.redaction",
    "FrameMasks": ".privacy.masks",
    "CenterFace": ".privacy.centerface",
    "PrivacyModels": ".privacy.model_file",
})

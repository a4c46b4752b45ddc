"""Prometheus metrics of an edge process (label ``edge`` on every series, ``camera`` where per camera)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from vcascade.core.telemetry import LATENCY_BUCKETS_S
from vcascade.core.wire import Roi

FRAMES_DECODED = Counter("vcascade_edge_frames_decoded_total", "Frames decoded from the camera.", ["edge", "camera"])
FRAMES_SKIPPED = Counter(
    "vcascade_edge_frames_skipped_total", "Frames replaced in the newest-frame slot before detection.", ["edge", "camera"]
)
FRAMES_DETECTED = Counter("vcascade_edge_frames_detected_total", "Frames that went through the detector.", ["edge", "camera"])
DETECTIONS = Counter("vcascade_edge_detections_total", "Detections kept after NMS and class filter.", ["edge", "camera"])
ROIS_SENT = Counter("vcascade_edge_rois_sent_total", "ROIs created and handed to the sender.", ["edge", "camera"])
RESULTS = Counter("vcascade_edge_results_total", "Results received and written to the sinks.", ["edge", "camera"])
DROPS = Counter("vcascade_edge_roi_drops_total", "ROIs that ended without a result, by reason.", ["edge", "camera", "reason"])
MALFORMED = Counter("vcascade_edge_malformed_messages_total", "Undecodable messages dropped.", ["edge", "reason"])
CAMERA_UP = Gauge("vcascade_edge_camera_up", "1 while the camera is streaming, 0 otherwise.", ["edge", "camera"])
SEND_QUEUE = Gauge("vcascade_edge_send_queue_depth", "ROIs waiting for the in-flight window.", ["edge"])
IN_FLIGHT = Gauge("vcascade_edge_in_flight", "ROIs sent and not yet answered.", ["edge"])
HOP_SECONDS = Histogram(
    "vcascade_edge_hop_seconds",
    "Latency of each hop of the ROI's account, and end_to_end (capture to result), seconds.",
    ["edge", "camera", "hop"],
    buckets=LATENCY_BUCKETS_S,
)
CAMERA_STATE = Gauge(
    "vcascade_edge_camera_state",
    "1 for the camera's current state (connecting, streaming, stalled, backing_off, ended, failed), 0 for the others.",
    ["edge", "camera", "state"],
)
CAMERA_TRANSITIONS = Counter(
    "vcascade_edge_camera_transitions_total", "Entries into each camera state, by reason.", ["edge", "camera", "state", "reason"]
)
CAMERA_RECONNECTS = Counter(
    "vcascade_edge_camera_reconnects_total", "Reconnect attempts of a live camera after a failure or stall.", ["edge", "camera"]
)
CAMERA_BLOCKED = Counter(
    "vcascade_edge_camera_blocked_seconds_total",
    "Seconds a camera's reader waited for the detector to take its frames (backpressure, not a stall).",
    ["edge", "camera"],
)
FRAMES_RATE_SKIPPED = Counter(
    "vcascade_edge_frames_rate_skipped_total", "Frames not handed to the detector because of detect_fps.", ["edge", "camera"]
)
FRAMES_CORRUPT = Counter(
    "vcascade_edge_frames_corrupt_total",
    "Frames lost or unusable: pts_gap (frames missing, estimated from a PTS jump), pts_not_increasing, bad_image.",
    ["edge", "camera", "reason"],
)
ROIS_SUPPRESSED = Counter(
    "vcascade_edge_rois_suppressed_total",
    "Detections not sent by the ROI policy, by reason (class, size, score, no_route, tentative, sent_recently).",
    ["edge", "camera", "reason"],
)
TRACKED_LINES = Counter(
    "vcascade_edge_tracked_lines_total", "`tracked` output lines (followed detections not sent).", ["edge", "camera"]
)
BROKER_UP = Gauge(
    "vcascade_edge_broker_up", "1 while the broker is alive (heard within the liveness window).", ["edge", "broker"]
)
BROKER_ROIS_SENT = Counter(
    "vcascade_edge_broker_rois_sent_total", "ROI sends to each broker, retries and probes included.", ["edge", "broker"]
)
RETRIES = Counter(
    "vcascade_edge_roi_retries_total", "ROIs scheduled for another send, by cause.", ["edge", "reason"]
)
DUPLICATE_ANSWERS = Counter(
    "vcascade_edge_duplicate_answers_total",
    "Results or drops for ROIs already ended (late or duplicate answers; never written to the sinks).",
    ["edge"],
)
RECOGNIZER_ROIS_SENT = Counter(
    "vcascade_edge_recognizer_rois_sent_total",
    "ROIs created and handed to the sender, by the recognizer they are routed to (`any`: unrouted).",
    ["edge", "camera", "recognizer"],
)
RECOGNIZER_RESULTS = Counter(
    "vcascade_edge_recognizer_results_total",
    "Results received and written to the sinks, by the recognizer that answered (`any`: unrouted).",
    ["edge", "camera", "recognizer"],
)



def by_recognizer(counter: Counter, edge: str, roi: Roi) -> Counter:
    """``counter`` (labels edge, camera, recognizer) for one ROI; an unrouted ROI (``recognizer == ""``) counts
    as ``any``."""
    return counter.labels(edge, roi.camera, roi.recognizer or "any")

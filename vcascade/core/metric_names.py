"""Every Prometheus metric family vcascade exports, with the event that moves it.

One table used by the dashboard/alert checks (every metric a query names must be here) and by the
"every metric moves" test (tests/e2e/test_metrics_move.py reads each family before and after its scenario).
Names are the exposed family names (counters with ``_total``; histograms without ``_bucket``/``_sum``/``_count``).
``scenario`` names the test scenario that produces the event; ``covered:<test file>`` points to an existing test
that triggers the event and asserts the metric (faults too costly to stage twice: CurveZMQ handshakes, broker
restarts, worker loss); ``unstaged:<why>`` marks the one event no test stages yet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: ``name``, ``kind`` (counter/gauge/histogram), ``labels``, the ``event`` that moves it,
    and the ``scenario`` of tests/e2e/test_metrics_move.py that causes that event."""

    name: str
    kind: str
    labels: tuple[str, ...]
    event: str
    scenario: str


def _m(name: str, kind: str, labels: tuple[str, ...], event: str, scenario: str) -> MetricSpec:
    return MetricSpec(name, kind, labels, event, scenario)


_EDGE = (
    _m("vcascade_edge_frames_decoded_total", "counter", ("edge", "camera"), "a frame decoded", "pipeline"),
    _m("vcascade_edge_frames_skipped_total", "counter", ("edge", "camera"),
       "a newest-frame slot overwritten before detection", "skipping"),
    _m("vcascade_edge_frames_rate_skipped_total", "counter", ("edge", "camera"), "a frame skipped by detect_fps",
       "skipping"),
    _m("vcascade_edge_frames_corrupt_total", "counter", ("edge", "camera", "reason"), "a PTS gap in the video",
       "corrupt"),
    _m("vcascade_edge_frames_detected_total", "counter", ("edge", "camera"), "a frame through the detector",
       "pipeline"),
    _m("vcascade_edge_detections_total", "counter", ("edge", "camera"), "a detection kept", "pipeline"),
    _m("vcascade_edge_rois_sent_total", "counter", ("edge", "camera"), "an ROI sent", "pipeline"),
    _m("vcascade_edge_rois_suppressed_total", "counter", ("edge", "camera", "reason"),
       "a detection not sent by the ROI policy", "pipeline"),
    _m("vcascade_edge_tracked_lines_total", "counter", ("edge", "camera"), "a `tracked` line written", "pipeline"),
    _m("vcascade_edge_results_total", "counter", ("edge", "camera"), "a result written", "pipeline"),
    _m("vcascade_edge_roi_drops_total", "counter", ("edge", "camera", "reason"), "an ROI ended without result",
       "no_worker"),
    _m("vcascade_edge_roi_retries_total", "counter", ("edge", "reason"), "an ROI re-sent", "no_worker"),
    _m("vcascade_edge_duplicate_answers_total", "counter", ("edge",), "a second answer for one ROI",
       "covered:tests/edge/test_link.py"),
    _m("vcascade_edge_malformed_messages_total", "counter", ("edge", "reason"), "an undecodable message",
       "malformed"),
    _m("vcascade_edge_camera_up", "gauge", ("edge", "camera"), "the camera streams", "pipeline"),
    _m("vcascade_edge_camera_state", "gauge", ("edge", "camera", "state"), "a camera state change", "pipeline"),
    _m("vcascade_edge_camera_transitions_total", "counter", ("edge", "camera", "state", "reason"),
       "a camera state change", "pipeline"),
    _m("vcascade_edge_camera_reconnects_total", "counter", ("edge", "camera"), "a live camera reconnect",
       "dead_camera"),
    _m("vcascade_edge_camera_blocked_seconds_total", "counter", ("edge", "camera"),
       "a reader waiting on the detector (every_frame)", "pipeline"),
    _m("vcascade_edge_send_queue_depth", "gauge", ("edge",), "ROIs waiting for the in-flight window", "pipeline"),
    _m("vcascade_edge_in_flight", "gauge", ("edge",), "ROIs sent, not yet answered", "pipeline"),
    _m("vcascade_edge_hop_seconds", "histogram", ("edge", "camera", "hop"), "a result's latency account",
       "pipeline"),
    _m("vcascade_edge_broker_up", "gauge", ("edge", "broker"), "a broker heard", "pipeline"),
    _m("vcascade_edge_broker_rois_sent_total", "counter", ("edge", "broker"), "an ROI sent to a broker", "pipeline"),
    _m("vcascade_edge_auth_failures_total", "counter", ("edge", "reason"), "a refused CurveZMQ handshake",
       "covered:tests/core/test_security.py"),
)
_BROKER = (
    _m("vcascade_broker_rois_received_total", "counter", ("broker", "camera"), "an ROI from an edge", "pipeline"),
    _m("vcascade_broker_rois_dispatched_total", "counter", ("broker",), "an ROI to a worker", "pipeline"),
    _m("vcascade_broker_results_total", "counter", ("broker",), "a result forwarded", "pipeline"),
    _m("vcascade_broker_drops_total", "counter", ("broker", "reason"), "an ROI the broker gave up (stale)",
       "no_worker"),
    _m("vcascade_broker_malformed_messages_total", "counter", ("broker", "side", "reason"), "garbage on a socket",
       "malformed"),
    _m("vcascade_broker_rois_redispatched_total", "counter", ("broker",), "a worker lost with ROIs",
       "covered:tests/broker/test_server.py"),
    _m("vcascade_broker_send_failures_total", "counter", ("broker", "side", "reason"), "a refused send",
       "covered:tests/broker/test_reliability.py"),
    _m("vcascade_broker_edges", "gauge", ("broker",), "an edge heard", "pipeline"),
    _m("vcascade_broker_queue_depth", "gauge", ("broker",), "ROIs waiting for credit", "no_worker"),
    _m("vcascade_broker_in_flight", "gauge", ("broker",), "ROIs held by workers", "pipeline"),
    _m("vcascade_broker_workers", "gauge", ("broker",), "a worker registered", "pipeline"),
    _m("vcascade_broker_worker_credits", "gauge", ("broker", "worker"), "a worker's Ready", "pipeline"),
    _m("vcascade_broker_queue_seconds", "histogram", ("broker",), "an ROI dispatched", "pipeline"),
    _m("vcascade_broker_auth_failures_total", "counter", ("broker", "reason"), "a refused CurveZMQ handshake",
       "covered:tests/core/test_security.py"),
)
_WORKER = (
    _m("vcascade_worker_rois_received_total", "counter", ("worker",), "an ROI received", "pipeline"),
    _m("vcascade_worker_results_total", "counter", ("worker",), "a result sent", "pipeline"),
    _m("vcascade_worker_drops_total", "counter", ("worker", "reason"), "an ROI dropped (bad JPEG)", "malformed"),
    _m("vcascade_worker_malformed_messages_total", "counter", ("worker", "reason"), "garbage from a broker",
       "covered:tests/center/test_worker.py"),
    _m("vcascade_worker_batch_size", "histogram", ("worker",), "a micro-batch computed", "pipeline"),
    _m("vcascade_worker_stage_seconds", "histogram", ("worker", "stage"), "a stage computed", "pipeline"),
    _m("vcascade_worker_stage_busy_seconds_total", "counter", ("worker", "stage"), "a stage computed", "pipeline"),
    _m("vcascade_worker_hop_seconds", "histogram", ("worker", "hop"), "a result sent", "pipeline"),
    _m("vcascade_worker_queue_depth", "gauge", ("worker", "queue"), "ROIs or micro-batches waiting",
       "covered:tests/center/test_queue_depth_metric.py"),
    _m("vcascade_worker_send_failures_total", "counter", ("worker", "reason"), "a header refused (hwm)",
       "unstaged: a broker that stops reading while thousands of results queue (too slow for CI)"),
    _m("vcascade_worker_reconnects_total", "counter", ("worker",), "a silent broker replaced",
       "covered:tests/center/test_worker.py"),
    _m("vcascade_worker_in_flight", "gauge", ("worker",), "ROIs held", "pipeline"),
    _m("vcascade_worker_credits", "gauge", ("worker",), "the worker started", "pipeline"),
    _m("vcascade_worker_auth_failures_total", "counter", ("worker", "reason"), "a refused CurveZMQ handshake",
       "covered:tests/core/test_telemetry_auth.py"),
)
_PROCESS = (
    _m("vcascade_build_info", "gauge", ("component", "name", "version"), "a component started", "pipeline"),
    _m("process_cpu_seconds_total", "counter", (), "CPU used (prometheus_client process collector)", "pipeline"),
    _m("process_resident_memory_bytes", "gauge", (), "memory used (prometheus_client process collector)",
       "pipeline"),
)

METRICS: dict[str, MetricSpec] = {m.name: m for m in (*_EDGE, *_BROKER, *_WORKER, *_PROCESS)}
"""Every exported metric family by name."""

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
"""Series suffixes of a histogram family in the exposition format and in PromQL."""


def family_of(series: str) -> str | None:
    """The family in :data:`METRICS` a PromQL/exposition series name belongs to (``..._bucket`` → histogram),
    or None if it is not a vcascade metric."""
    if series in METRICS:
        return series
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and METRICS.get(base, None) is not None and METRICS[base].kind == "histogram":
            return base
    return None

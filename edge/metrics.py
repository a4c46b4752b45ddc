"""Prometheus metrics of an edge process (``vcascade_edge_*``; label ``edge`` on every series, ``camera`` where per
camera) and the objects that count events into them.

The families are module globals registered once in the process's default registry (served by
:func:`vcascade.core.telemetry.metrics.serve_metrics`), so several edges in one process (tests) share them and differ by
their ``edge`` label. :class:`EdgeTelemetry` binds them to one edge name and offers one method per event;
:class:`CameraTelemetry` does the same for one camera's reader and state machine. A series appears when its
first event is counted, except a camera's frame counters, which read 0 from the camera's start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from vcascade.core.transport.disconnects import disconnects_counter
from vcascade.core.transport.security import auth_failures_counter
from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S
from vcascade.core.protocol.wire import Roi

FRAMES_DECODED = Counter("vcascade_edge_frames_decoded_total", "Frames decoded from the camera.", ["edge", "camera"])
FRAMES_SKIPPED = Counter(
    "vcascade_edge_frames_skipped_total", "Frames replaced in the newest-frame slot before detection.", ["edge", "camera"]
)
FRAMES_DETECTED = Counter("vcascade_edge_frames_detected_total", "Frames that went through the detector.", ["edge", "camera"])
DETECTIONS = Counter("vcascade_edge_detections_total", "Detections kept after NMS and class filter.", ["edge", "camera"])
ROIS_SENT = Counter("vcascade_edge_rois_sent_total", "ROIs created and handed to the sender.", ["edge", "camera"])
RESULTS = Counter(
    "vcascade_edge_results_total",
    "Results received; each is written to every sink or counted in vcascade_edge_sink_lines_lost_total.",
    ["edge", "camera"],
)
RESULTS_ON_TIME = Counter(
    "vcascade_edge_results_on_time_total", "Results within roi.deadline_ms of their capture (goodput).", ["edge"]
)
RESULTS_LATE = Counter("vcascade_edge_results_late_total", "Results past roi.deadline_ms of their capture.", ["edge"])
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
    "1 for the camera's current state (connecting, streaming, stalled, backing_off, ended, failed), 0 for the others; "
    "reason: why the camera last entered that state (docs/CAMERAS.md).",
    ["edge", "camera", "state", "reason"],
)
CAMERA_TRANSITIONS = Counter(
    "vcascade_edge_camera_transitions_total", "Entries into each camera state, by reason.", ["edge", "camera", "state", "reason"]
)
CAMERA_URL_REFUSALS = Counter(
    "vcascade_edge_camera_url_refusals_total",
    "Camera URLs refused before or at opening, by reason (protocol_not_allowed, host_not_allowed, "
    "redirect_refused, not_video; vcascade.edge.capture.url_policy).", ["edge", "reason"],
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
DETECTIONS_SKIPPED = Counter(
    "vcascade_edge_detections_skipped_total",
    "Frames handed over but not detected, by reason (no_motion: the camera's motion gate found the frame still; its "
    "tracks were carried over).", ["edge", "camera", "reason"],
)
FRAMES_CORRUPT = Counter(
    "vcascade_edge_frames_corrupt_total",
    "Frames lost or damaged: corrupt (decoder flag or undecodable packet), missing_reference, before_keyframe, "
    "pts_gap (frames missing from the stream), pts_not_increasing, bad_image.",
    ["edge", "camera", "reason"],
)
DECODER_FALLBACKS = Counter(
    "vcascade_edge_decoder_fallbacks_total",
    "Openings where a hardware decoder (device: cuda, qsv) could not be used and the next one or software was.",
    ["edge", "camera", "device", "reason"],
)
CAMERA_DECODER = Gauge(
    "vcascade_edge_camera_decoder", "1 for the decoder the camera uses (software, cuda, qsv), 0 for the others.",
    ["edge", "camera", "decoder"],
)
TIMESTAMP_DISCONTINUITIES = Counter(
    "vcascade_edge_timestamp_discontinuities_total",
    "Restarts of a camera's stream clock (reconnect, PTS restart) joined into its timeline; not lost frames.",
    ["edge", "camera"],
)
FFMPEG_LOG_LINES = Counter(
    "vcascade_edge_ffmpeg_log_lines_total",
    "FFmpeg's own log lines (warnings and errors), re-logged at DEBUG with the camera's name (`-`: no camera).",
    ["edge", "camera", "level"],
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

SINK_LINES_WRITTEN = Counter(
    "vcascade_edge_sink_lines_written_total",
    "Records delivered by each sink: whole lines written (jsonl, zmq_pub), acknowledged (mqtt: PUBACK) or "
    "answered 2xx (webhook) (`sink`: its type and position in the edge's sinks list, e.g. jsonl[0]).",
    ["edge", "sink"],
)
SINK_LINES_LOST = Counter(
    "vcascade_edge_sink_lines_lost_total",
    "Records a sink will never deliver, by reason (disk_full, quota, file_too_large, read_only, permission, closed, "
    "io_error, bad_record, queue_full, retries_exhausted, rejected, shutdown, other); nothing of a lost line stays "
    "in the sink.",
    ["edge", "sink", "reason"],
)
SINK_RECORDS_EMITTED = Counter(
    "vcascade_edge_sink_records_emitted_total",
    "Records handed to each sink's queue, by kind (result, event, event_update, camera_state); per sink, emitted = "
    "written + lost + queued.",
    ["edge", "sink", "kind"],
)
SINK_QUEUE_DEPTH = Gauge(
    "vcascade_edge_sink_queue_depth",
    "Records a sink holds and has not delivered or dropped yet (queued, or in a delivery attempt).",
    ["edge", "sink"],
)
SINK_ATTEMPTS_FAILED = Counter(
    "vcascade_edge_sink_attempts_failed_total",
    "Delivery attempts or connections of a sink that failed and are retried, by reason (timeout, connection, "
    "http_5xx, http_429, http_408, not_authorized, refused, disconnected).",
    ["edge", "sink", "reason"],
)

CONTROL_REQUESTS = Counter(
    "vcascade_edge_control_requests_total",
    "Control socket requests, by operation and outcome (ok, refused: invalid or impossible, malformed, "
    "version: another control protocol version, timeout).",
    ["edge", "op", "outcome"],
)
IMAGES_OUT = Counter(
    "vcascade_edge_images_out_total",
    "Images that left the edge, by exit (roi: a crop put on a broker socket, retries included; preview: a preview "
    "served over HTTP; snapshot) and redacted (true: the camera's face or text redaction ran on it; false: this "
    "exit or route leaves faces and text as they are). Privacy masks are filled in every frame either way "
    "(docs/PRIVACY.md).",
    ["edge", "exit", "redacted"],
)
AUTH_FAILURES = auth_failures_counter("edge")
"""``vcascade_edge_auth_failures_total{edge, reason}``: refused CurveZMQ handshakes (declared by
:func:`vcascade.core.transport.security.auth_failures_counter`, which the control socket's monitor counts into too)."""
DISCONNECTS = disconnects_counter("edge")
"""``vcascade_edge_disconnects_total{edge, socket}``: connections the control socket lost, among them clients libzmq
cut for a request over the size limit (:mod:`vcascade.core.transport.disconnects`)."""

ANY_RECOGNIZER_LABEL = "any"
"""``recognizer`` label value of an ROI routed to no particular recognizer (``Roi.recognizer == ""``)."""


class EdgeTelemetry:
    """Counts the events of one edge into its metrics. Thread-safe (prometheus_client's own locks); holds no
    state besides the name, so each part of the edge may create its own.

    Args:
        edge: the edge's name from the deployment file (label value).
    """

    def __init__(self, edge: str) -> None:
        self.edge = edge

    # ------------------------------------------------------------ broker link

    def broker_up(self, broker: str, up: bool) -> None:
        """Broker ``broker`` is alive (heard within the liveness window) or not."""
        BROKER_UP.labels(self.edge, broker).set(1 if up else 0)

    def roi_submitted(self, roi: Roi) -> None:
        """One ROI created and handed to the sender (per camera, and per recognizer it is routed to)."""
        ROIS_SENT.labels(self.edge, roi.camera).inc()
        RECOGNIZER_ROIS_SENT.labels(self.edge, roi.camera, roi.recognizer or ANY_RECOGNIZER_LABEL).inc()

    def roi_sent_to(self, broker: str) -> None:
        """One ROI put on broker ``broker``'s socket (retries and probes included)."""
        BROKER_ROIS_SENT.labels(self.edge, broker).inc()

    def image_out(self, exit_name: str, redacted: bool) -> None:
        """One image left the edge through ``exit_name`` (``roi``, ``preview``, ``snapshot``), faces redacted or not."""
        IMAGES_OUT.labels(self.edge, exit_name, "true" if redacted else "false").inc()

    def send_queue_depth(self, depth: int) -> None:
        """ROIs waiting for the in-flight window now."""
        SEND_QUEUE.labels(self.edge).set(depth)

    def in_flight(self, count: int) -> None:
        """ROIs sent and not yet answered now."""
        IN_FLIGHT.labels(self.edge).set(count)

    def result_received(self, roi: Roi, latency_ms: dict[str, float]) -> None:
        """One result received (its line handed to the sinks); ``latency_ms`` is its closed latency account
        (hop -> ms, with ``end_to_end``), observed in seconds. A hop time that is not finite (a worker's NaN) is
        not observed: it would turn the histogram's sum into NaN for good."""
        RESULTS.labels(self.edge, roi.camera).inc()
        RECOGNIZER_RESULTS.labels(self.edge, roi.camera, roi.recognizer or ANY_RECOGNIZER_LABEL).inc()
        for hop, ms in latency_ms.items():
            if math.isfinite(ms):
                HOP_SECONDS.labels(self.edge, roi.camera, hop).observe(ms / 1000.0)

    def result_timeliness(self, on_time: bool) -> None:
        """One result within (``on_time``) or past the edge's ``roi.deadline_ms``."""
        (RESULTS_ON_TIME if on_time else RESULTS_LATE).labels(self.edge).inc()

    def sink_line_written(self, sink: str, count: int = 1) -> None:
        """``count`` records delivered by sink ``sink``."""
        SINK_LINES_WRITTEN.labels(self.edge, sink).inc(count)

    def sink_line_lost(self, sink: str, reason: str, count: int = 1) -> None:
        """``count`` records sink ``sink`` will never deliver, for ``reason`` (:data:`vcascade.edge.sinks.registry.LOSS_REASONS`)."""
        SINK_LINES_LOST.labels(self.edge, sink, reason).inc(count)

    def sink_records_emitted(self, sink: str, kind: str) -> Any:
        """The counter of records of ``kind`` handed to sink ``sink``'s queue, bound to its labels: the caller keeps
        it and calls ``inc()`` per record (no label lookup on the edge's result path)."""
        return SINK_RECORDS_EMITTED.labels(self.edge, sink, kind)

    def sink_queue_depth_from(self, sink: str, held: Callable[[], int]) -> None:
        """Read sink ``sink``'s records held (queued or in a delivery attempt) from ``held()`` at each scrape."""
        SINK_QUEUE_DEPTH.labels(self.edge, sink).set_function(held)

    def sink_attempt_failed(self, sink: str, reason: str) -> None:
        """One delivery attempt or connection of sink ``sink`` failed for ``reason``; it is retried."""
        SINK_ATTEMPTS_FAILED.labels(self.edge, sink, reason).inc()

    def roi_dropped(self, camera: str, reason: str) -> None:
        """One ROI of ``camera`` ended without a result, for ``reason``."""
        DROPS.labels(self.edge, camera, reason).inc()

    def roi_retried(self, reason: str) -> None:
        """One ROI scheduled for another send, because of ``reason`` (``timeout``, ``broker_lost``)."""
        RETRIES.labels(self.edge, reason).inc()

    def duplicate_answer(self) -> None:
        """One result or drop for an ROI already ended (never written)."""
        DUPLICATE_ANSWERS.labels(self.edge).inc()

    def malformed(self, reason: str) -> None:
        """One undecodable message (or sink record, ``bad_record``) dropped."""
        MALFORMED.labels(self.edge, reason).inc()

    def auth_failed(self, reason: str) -> None:
        """One CurveZMQ handshake with a broker refused (:data:`vcascade.core.transport.security.FAILURE_REASONS`)."""
        AUTH_FAILURES.labels(self.edge, reason).inc()

    # ------------------------------------------------------------ detection and ROI policy

    def frame_detected(self, camera: str, detections: int) -> None:
        """One frame of ``camera`` went through the detector and kept ``detections`` detections."""
        FRAMES_DETECTED.labels(self.edge, camera).inc()
        DETECTIONS.labels(self.edge, camera).inc(detections)

    def detection_skipped(self, camera: str, reason: str = "no_motion") -> None:
        """One frame of ``camera`` not detected, for ``reason`` (:mod:`vcascade.edge.detection.motion`)."""
        DETECTIONS_SKIPPED.labels(self.edge, camera, reason).inc()

    def rois_suppressed(self, camera: str, reason: str, count: int) -> None:
        """``count`` detections of ``camera`` not sent by the ROI policy, for ``reason``."""
        ROIS_SUPPRESSED.labels(self.edge, camera, reason).inc(count)

    def tracked_line(self, camera: str) -> None:
        """One ``tracked`` line written for ``camera``."""
        TRACKED_LINES.labels(self.edge, camera).inc()

    def frame_rejected(self, camera: str) -> None:
        """One frame of ``camera`` the detector rejected (unsupported shape or dtype): corrupt, ``bad_image``."""
        FRAMES_CORRUPT.labels(self.edge, camera, "bad_image").inc()

    # ------------------------------------------------------------ control socket

    def control_request(self, op: str, outcome: str) -> None:
        """One control socket request ``op`` (``unknown`` when undecodable) ended with ``outcome``."""
        CONTROL_REQUESTS.labels(self.edge, op, outcome).inc()


class CameraTelemetry:
    """Counts the events of one camera's reader and state machine. Its frame counters are bound (and so read 0)
    from construction on; create one per camera reader.

    Args:
        edge: the edge's name (label value).
        camera: the camera's name (label value).
    """

    def __init__(self, edge: str, camera: str) -> None:
        self.edge, self.camera = edge, camera
        self._per_frame = (FRAMES_DECODED.labels(edge, camera), FRAMES_RATE_SKIPPED.labels(edge, camera),
                           CAMERA_BLOCKED.labels(edge, camera), FRAMES_SKIPPED.labels(edge, camera))
        self._published: tuple[int, int, float, int] = (0, 0, 0.0, 0)
        self._reasons: dict[str, str] = {}
        self._state_series: dict[tuple[str, str], Any] = {}  # (state, reason) -> its bound gauge (labels() costs)
        self._up = CAMERA_UP.labels(edge, camera)

    def publish_reader_totals(self, decoded: int, rate_skipped: int, blocked_s: float, skipped: int) -> None:
        """Bring the per-frame counters up to the reader's running totals: frames decoded, frames not handed to the
        detector because of ``detect_fps``, seconds waited for the detector to take frames (backpressure), frames
        replaced in the newest-frame slot. The camera's supervisor calls this at each look at its session (at least
        every ``LOOK_INTERVAL_S``) and at the end, so the decoding thread touches no Prometheus counter per frame
        (each ``inc`` takes a lock: 1-2 us).
        """
        totals = (decoded, rate_skipped, blocked_s, skipped)
        for counter, total, published in zip(self._per_frame, totals, self._published, strict=True):
            if total > published:
                counter.inc(total - published)
        self._published = tuple(map(max, totals, self._published))

    def frames_corrupt(self, reason: str, count: int) -> None:
        """``count`` frames lost or damaged, for ``reason`` (:data:`vcascade.edge.capture.faults.FRAME_LOSS_REASONS`)."""
        FRAMES_CORRUPT.labels(self.edge, self.camera, reason).inc(count)

    def timestamp_discontinuities(self, count: int) -> None:
        """``count`` restarts of the camera's stream clock joined into its timeline
        (:class:`vcascade.edge.capture.timing.Timeline`)."""
        TIMESTAMP_DISCONTINUITIES.labels(self.edge, self.camera).inc(count)

    def decoder_fallback(self, device: str, reason: str) -> None:
        """Hardware decoder ``device`` was not used when the source opened, for ``reason``
        (:data:`vcascade.edge.capture.hwdecode.FALLBACK_REASONS`)."""
        DECODER_FALLBACKS.labels(self.edge, self.camera, device, reason).inc()

    def decoder_in_use(self, decoder: str) -> None:
        """The camera decodes with ``decoder`` (``software``, ``cuda``, ``qsv``): 1 for it, 0 for the others."""
        for name in ("software", "cuda", "qsv"):
            CAMERA_DECODER.labels(self.edge, self.camera, name).set(1 if name == decoder else 0)

    def reconnecting(self) -> None:
        """One reconnect attempt of a live camera after a failure or stall."""
        CAMERA_RECONNECTS.labels(self.edge, self.camera).inc()

    def entered(self, state: str, reason: str) -> None:
        """The camera entered ``state`` because of ``reason`` (:mod:`vcascade.edge.capture.state`)."""
        CAMERA_TRANSITIONS.labels(self.edge, self.camera, state, reason).inc()

    def show_state(self, current: str, states: tuple[str, ...], reason: str = "start") -> None:
        """Publish the current state: 1 for ``current`` and 0 for the other ``states`` (the Prometheus "state set"
        pattern), each series labelled with the reason its state was last entered for (one series per state: the
        previous reason's series of ``current`` is removed); the camera is up while ``streaming``."""
        if current in self._reasons and self._reasons[current] != reason:
            CAMERA_STATE.remove(self.edge, self.camera, current, self._reasons[current])
            self._state_series.pop((current, self._reasons[current]), None)
        self._reasons[current] = reason
        for state in states:
            self._state_gauge(state, self._reasons.setdefault(state, "")).set(1 if state == current else 0)
        self._up.set(1 if current == "streaming" else 0)

    def _state_gauge(self, state: str, reason: str) -> Any:
        """The camera's ``vcascade_edge_camera_state`` series of ``state`` and ``reason``, bound once: a state change
        publishes seven series, and ``labels()`` validates and looks up its labels at each call (about 20 us each
        on the 2-core test machine, several per camera start)."""
        series = self._state_series.get((state, reason))
        if series is None:
            series = self._state_series[state, reason] = CAMERA_STATE.labels(self.edge, self.camera, state, reason)
        return series


def count_ffmpeg_log_line(edge: str, camera: str, level: str) -> None:
    """One FFmpeg log line of ``camera`` (``-``: from no camera's thread) at FFmpeg ``level`` (error, warning...)."""
    FFMPEG_LOG_LINES.labels(edge, camera, level).inc()

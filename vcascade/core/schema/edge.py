"""The edge side of the deployment file: cameras, tracking and ROI policy, routes, crops, sinks, edge processes."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from vcascade.core.private_files import DIR_MODE, FILE_MODE, Mode, mode_field
from vcascade.core.schema.analytics import AnalyticsConfig
from vcascade.core.schema.base import ConfigModel, Name, Port, cpus_field, key_problem
from vcascade.core.schema.detector import DetectorConfig, YoloxDetectorConfig
from vcascade.core.schema.history import HistoryConfig, HistoryLimits
from vcascade.core.schema.privacy import PrivacyConfig
from vcascade.core.schema.sinks import MqttSinkConfig, WebhookSinkConfig, drain_timeout_field, queue_max_field
from vcascade.core.schema.view import CameraViewConfig

# ---------------------------------------------------------------- tracking and ROI policy


class TrackerConfig(ConfigModel):
    """ByteTrack settings (Roboflow ``trackers.ByteTrackTracker``; defaults from the ByteTrack reference code)."""

    high_score: float = Field(
        0.5, gt=0, le=1, description="Detections this sure are matched first; less sure ones only keep tracks alive."
    )
    new_track_score: float = Field(0.6, gt=0, le=1, description="A detection this sure may start a new track.")
    min_iou: float = Field(0.1, gt=0, le=1, description="Box IoU below which a detection never matches a track.")
    min_hits: int = Field(
        2, ge=1, le=100, description="Frames a new track must be matched in before it gets an id (1 and 2 act alike)."
    )
    lost_track_s: float = Field(1.0, gt=0, le=600, description="Stream seconds a lost track is kept for re-matching.")


class RoiPolicyConfig(ConfigModel):
    """Which detections become ROIs (rules: edge/selection/roi_policy.py; docs/USAGE.md, "Tracking and ROI policy")."""

    mode: Literal["track", "every_detection"] = Field(
        "track", description="`track`: send a track once, then on refresh or a better crop; `every_detection`: all."
    )
    refresh_s: float = Field(10.0, ge=0, description="Resend a track's crop after this many stream seconds (0: never).")
    better_area_ratio: float = Field(
        1.5, gt=1, description="Resend when the box area reaches this multiple of the last sent one (score not lower)."
    )
    better_score_margin: float = Field(
        0.15, gt=0, le=1, description="Resend when the score beats the last sent one by this much (area not smaller)."
    )
    classes: list[str] | None = Field(None, min_length=1, description="COCO class names to send (None: all detected).")
    min_score: float = Field(0.0, ge=0, le=1, description="Detections scoring lower are not sent.")
    max_size_px: int | None = Field(None, ge=1, description="Detections wider or higher than this are not sent.")
    emit_tracked: bool = Field(
        True, description="Write a `tracked` line (with the track's last identity) for each detection not sent."
    )
    tracker: TrackerConfig = Field(TrackerConfig(), description="Tracker settings.")


MIN_CROP_SIDE_PX = 32
"""The smallest ``crop_max_side_px`` other than 0: a crop shrunk further holds too little for any recognizer."""


def check_crop_side(value: int | None) -> None:
    """``crop_max_side_px`` is None, 0 or at least :data:`MIN_CROP_SIDE_PX`.

    Raises:
        ValueError: otherwise, naming the key (:func:`vcascade.core.schema.base.key_problem`).
    """
    if value is not None and 0 < value < MIN_CROP_SIDE_PX:
        raise key_problem("crop_max_side_px", value, f"expected 0 (as cut) or at least {MIN_CROP_SIDE_PX} px")


class RouteConfig(ConfigModel):
    """Sends detections of some classes to one recognizer (docs/USAGE.md, "Routing"; first matching route wins)."""

    recognizer: Name = Field(description="Name of the recognizer (key under `recognizers`) these ROIs go to.")
    classes: list[str] | None = Field(
        None, min_length=1, description="Detector class names routed here (None: every class no earlier route took)."
    )
    unredacted_faces: bool = Field(
        False,
        description="The crops of this route leave with faces as they are even where the camera's `privacy.faces` "
        "redacts ROI crops (a face recognizer needs them); `vcascade check` lists every such route.",
    )
    crop_max_side_px: int | None = Field(
        None, ge=0, le=8192,
        description="Crops of this route whose longer side is larger are shrunk to it before encoding, px (0: sent as "
        "cut, at the frame's resolution, e.g. for a text recognizer reading plates; None: the edge's "
        "`roi.crop_max_side_px`). 0 or at least 32.",
    )

    @model_validator(mode="after")
    def _crop_side(self) -> RouteConfig:
        check_crop_side(self.crop_max_side_px)
        return self


# ---------------------------------------------------------------- cameras


class MotionConfig(ConfigModel):
    """Motion-gated detection of one camera (:mod:`vcascade.edge.detection.motion`): the detector runs on a frame
    only where it differs from the last detected frame, or when ``max_gap_s`` of stream time has passed."""

    width: int = Field(
        160, ge=16, le=1920, description="Width the grey motion image is shrunk to, px (height keeps the aspect ratio)."
    )
    pixel_threshold: int = Field(
        25, ge=1, le=255, description="Grey-level difference (0..255) above which a pixel of the motion image changed."
    )
    min_area: float = Field(
        0.0005, gt=0, le=1, description="Fraction of the motion image's pixels that must change to count as motion."
    )
    max_gap_s: float = Field(
        1.0, gt=0, le=600, description="Stream seconds after which a frame is detected even without motion."
    )



class CameraConfig(ConfigModel):
    """One camera: where its frames come from and which edge process reads it."""

    url: str = Field(
        description="Video file path, rtsp(s):// or http(s):// (MJPEG, HLS) URL, device://N (local camera index N), "
        "or package://<distribution>/<file> for sample data."
    )
    edge: Name = Field(description="Name of the edge (key under `edges`) that reads this camera.")
    rtsp_transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport (rtsp:// URLs only).")
    decoder: Literal["software", "auto", "cuda", "qsv"] = Field(
        "software",
        description="Video decoder: software (CPU), cuda (NVIDIA), qsv (Intel) or auto (cuda, then qsv); a hardware "
        "decoder that cannot be used falls back to software, counted in vcascade_edge_decoder_fallbacks_total.",
    )
    max_frames: int | None = Field(None, ge=1, description="Stop after this many decoded frames (None: to the end).")
    open_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Give up opening after this many seconds (live: back off and retry; file: fail)."
    )
    read_timeout_s: float = Field(
        10.0, gt=0, le=600,
        description="No frame for this many seconds = stalled: the read is abandoned; live: reconnect, file: fail.",
    )
    backoff_initial_s: float = Field(
        0.5, gt=0, le=600, description="Cap of the first reconnect delay, s (exponential backoff with full jitter)."
    )
    backoff_max_s: float = Field(30.0, gt=0, le=3600, description="Largest reconnect delay cap, s.")
    realtime: bool = Field(
        False, description="Files only: pace frames to the file's own timestamps, newest-frame slot (like a live camera)."
    )
    loop: bool = Field(
        False, description="Files and HLS playlists with an end: start again at the end (timestamps keep increasing)."
    )
    follow: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Files only: follow a file still being written (MPEG-TS, fragmented MP4, Matroska) until its "
        "writer has been idle for `follow_idle_s`; auto: when it changed less than `follow_idle_s` before opening.",
    )
    follow_idle_s: float = Field(
        5.0, gt=0, le=3600, description="A followed file ends (`writer_idle`) after this many seconds without new data."
    )
    detect_fps: float | None = Field(
        None, gt=0, le=1000,
        description="Hand at most this many frames per second of stream time (PTS) to the detector (None: every frame).",
    )
    motion: MotionConfig | None = Field(
        None,
        description="Run the detector only on frames with motion or after `max_gap_s` (tracks are carried over still "
        "frames; skips counted in vcascade_edge_detections_skipped_total). None: every frame handed over is detected.",
    )
    roi_policy: RoiPolicyConfig | None = Field(None, description="Overrides the edge's `roi.policy` for this camera.")
    routes: list[RouteConfig] | None = Field(
        None, min_length=1, description="Overrides the edge's `roi.routes` for this camera."
    )
    analytics: AnalyticsConfig | None = Field(None, description="Counting lines and zones (docs/EVENTS.md; None: none).")
    history: HistoryLimits | None = Field(
        None, description="This camera's own retention limits in the history store (its edge's `history` limits "
        "apply too; None: only those)."
    )
    view: CameraViewConfig | None = Field(
        None, description="Crop, mirror, rescale or re-encode every decoded frame (None: frames as decoded)."
    )
    privacy: PrivacyConfig | None = Field(
        None, description="Privacy masks, face and text redaction (docs/PRIVACY.md; None: frames and crops as they are)."
    )



# ---------------------------------------------------------------- edge


class RoiConfig(ConfigModel):
    """How a detection becomes a crop."""

    padding_px: int = Field(4, ge=0, le=512, description="Pixels added on each side of the box before cropping.")
    min_size_px: int = Field(16, ge=1, le=4096, description="Detections whose box is narrower or shorter are not sent.")
    jpeg_quality: int = Field(90, ge=1, le=100, description="JPEG quality of the encoded crop.")
    crop_max_side_px: int = Field(
        0, ge=0, le=8192,
        description="Crops whose longer side is larger are shrunk to it (area interpolation) before encoding, px "
        "(0: sent as cut, at the frame's resolution); a route's own `crop_max_side_px` overrides it. 0 or at least 32.",
    )

    @model_validator(mode="after")
    def _crop_side(self) -> RoiConfig:
        check_crop_side(self.crop_max_side_px)
        return self
    ttl_ms: float = Field(
        0.0, ge=0, description="Deadline: max age of an ROI, ms from frame capture to start of compute (0: none)."
    )
    deadline_ms: float = Field(
        0.0, ge=0,
        description="End-to-end deadline of a result, ms from frame capture to the result on the edge: results within "
        "it are goodput (`vcascade_edge_results_on_time_total`), later ones late (0: not counted).",
    )
    policy: RoiPolicyConfig = Field(RoiPolicyConfig(), description="Tracking and which detections are sent.")
    routes: list[RouteConfig] | None = Field(
        None, min_length=1,
        description="Which recognizer each class goes to, first match wins; a class no route matches is not sent "
        "(None: every ROI to the one recognizer the workers on this edge's brokers run).",
    )


class JsonlSinkConfig(ConfigModel):
    """Append one JSON object per result line to a file (created with its folders)."""

    type: Literal["jsonl"] = Field(description="Sink kind.")
    path: str = Field(description="Output file; relative paths are relative to the working directory.")
    mode: Literal["append", "truncate"] = Field("append", description="Keep earlier lines, or start the file afresh.")
    file_mode: Annotated[int, Mode] = mode_field(FILE_MODE, "file")
    dir_mode: Annotated[int, Mode] = mode_field(DIR_MODE, "folder")
    queue_max: int = queue_max_field()
    drain_timeout_s: float = drain_timeout_field()


class ZmqPubSinkConfig(ConfigModel):
    """Publish each result as a JSON frame on a ZeroMQ PUB socket (topic frame = camera name)."""

    type: Literal["zmq_pub"] = Field(description="Sink kind.")
    endpoint: str = Field(
        pattern=r"^(tcp|ipc|inproc)://",
        description="Bind address, e.g. tcp://127.0.0.1:5570; a non-loopback tcp address needs "
        "`security.curve.enabled` (or `security.allow_plaintext_remote`).",
    )
    subscribers: list[Name] | None = Field(
        None, description="With CurveZMQ: the names of the public keys (`NAME.key` in the authorized folder) "
        "allowed to subscribe (None: every key there).",
    )
    queue_max: int = queue_max_field()
    drain_timeout_s: float = drain_timeout_field()


SinkConfig = Annotated[
    Union[JsonlSinkConfig, ZmqPubSinkConfig, MqttSinkConfig, WebhookSinkConfig], Field(discriminator="type")
]


class EdgeConfig(ConfigModel):
    """One edge process: reads its cameras, detects, crops and sends ROIs, joins results, writes sinks."""

    brokers: list[Name] = Field(min_length=1, description="Brokers to send ROIs to.")
    camera_hosts: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9.:\[\]-]+(/[0-9]{1,3})?$")]] | None = Field(
        None, min_length=1,
        description="Hosts this edge's network cameras may be on: names (`cam-1.example.com`), addresses or "
        "networks (`10.20.0.0/16`); a redirect to a host not listed is refused (None: any host; redirects to "
        "another host are refused).",
    )
    detector: DetectorConfig = Field(YoloxDetectorConfig(), description="Object detector settings.")
    roi: RoiConfig = Field(RoiConfig(), description="Crop settings.")
    sinks: list[SinkConfig] = Field(default_factory=list, description="Where results are written.")
    max_in_flight: int = Field(64, ge=1, le=100_000, description="ROIs sent and not yet answered, at most.")
    send_queue_max: int = Field(256, ge=1, le=1_000_000, description="ROIs waiting for the in-flight window, at most.")
    overflow: Literal["block", "drop_oldest"] = Field(
        "block", description="Full send queue: block the detector (files), or drop the oldest ROI (live)."
    )
    roi_timeout_s: float = Field(
        30.0, gt=0, description="An ROI unanswered for this long is re-sent (see `max_attempts`), then dropped as `timeout`."
    )
    max_attempts: int = Field(
        2, ge=1, le=10, description="Sends of one ROI at most, first included (retries on timeout or a lost broker)."
    )
    drain_timeout_s: float = Field(60.0, ge=0, description="At shutdown, wait this long for in-flight results.")
    cpus: int | None = cpus_field()
    opencv_threads: int = Field(
        1, ge=0, le=256,
        description="cv2.setNumThreads for this process (0: OpenCV default; 1: readers and detector runs are "
        "threads of their own already).",
    )
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")
    host: str = Field(
        "127.0.0.1", description="Address this edge's control socket is reached at (`vcascade camera add|remove|list`)."
    )
    bind: str | None = Field(None, description="Address the control socket binds (default: `host`; `*` for all).")
    control_port: Port | None = Field(
        None,
        description="Port of the control socket that adds and removes cameras at run time (docs/DEPLOY.md; "
        "None: no control socket). With it, the edge runs until stopped, even with no camera left.",
    )
    history: HistoryConfig = Field(
        HistoryConfig(), description="The history store: results, events and camera states kept for `vcascade search` "
        "(docs/HISTORY.md)."
    )
    preview_port: Port | None = Field(
        None, description="Port of the HTTP endpoint serving annotated previews to the live view (`ui:`), bound "
        "at `bind`/`host` (None: no previews).",
    )

    def control_endpoint(self, *, bind: bool = False) -> str:
        """ZeroMQ tcp endpoint of the control socket, for ``vcascade camera`` or (``bind=True``) for the edge.

        Raises:
            ValueError: ``control_port`` is not set.
        """
        if self.control_port is None:
            raise ValueError("control_port is not set")
        host = (self.bind or self.host) if bind else self.host
        return f"tcp://{host}:{self.control_port}"

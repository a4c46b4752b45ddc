"""Deployment configuration: one YAML file describing cameras, edges, brokers, workers and recognizers.

Loaded with :func:`load_config`, which interpolates ``${VAR}`` / ``${VAR:-default}`` in string values, validates
the whole file with pydantic v2 models and then checks cross references (a camera's edge exists, a worker's
recognizer exists, ports are not reused, ...). Every problem becomes a :class:`ConfigError` that names the key
path, the bad value and what was expected; the CLI prints it and exits with code 2, without a traceback.

Validation is pure: no file, device or network is touched except reading the YAML itself (model files are
located at start-up by :mod:`vcascade.models`, not here).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vcascade.coco import COCO_CLASSES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Port = Annotated[int, Field(ge=1, le=65535)]

YOLOX_NANO_URL = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0/yolox_nano.onnx"
"""Official YOLOX-Nano ONNX release asset (Megvii-BaseDetection/YOLOX, release 0.1.1rc0, Apache-2.0)."""


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- tracking and ROI policy


class TrackerConfig(_Base):
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


class RoiPolicyConfig(_Base):
    """Which detections become ROIs (the rules: edge/roi_policy.py; README, "Tracking and ROI policy")."""

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


# ---------------------------------------------------------------- cameras


class CameraConfig(_Base):
    """One camera: where its frames come from and which edge process reads it."""

    url: str = Field(
        description="Video file path, rtsp(s):// or http(s):// (MJPEG, HLS) URL, device://N (local camera index N), "
        "or package://<distribution>/<file> for sample data."
    )
    edge: Name = Field(description="Name of the edge (key under `edges`) that reads this camera.")
    rtsp_transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport (rtsp:// URLs only).")
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
    loop: bool = Field(False, description="Files only: start again at the end (timestamps keep increasing).")
    detect_fps: float | None = Field(
        None, gt=0, le=1000,
        description="Hand at most this many frames per second of stream time (PTS) to the detector (None: every frame).",
    )
    roi_policy: RoiPolicyConfig | None = Field(None, description="Overrides the edge's `roi.policy` for this camera.")


# ---------------------------------------------------------------- edge


class DetectorConfig(_Base):
    """The edge's object detector (ONNX Runtime)."""

    type: Literal["yolox", "yolov5", "yolov8"] = Field(
        "yolox", description="Detector family (registry key): `yolox`, `yolov5`, `yolov8` (also YOLO11)."
    )
    model: str = Field("yolox_nano.onnx", description="File name in the model directory, or an absolute path.")
    url: str = Field(YOLOX_NANO_URL, description="Where to download the model when it is not in the model directory.")
    input_size: int = Field(416, ge=32, le=4096, multiple_of=32, description="Square network input side, px.")
    score_threshold: float = Field(0.3, gt=0, le=1, description="Minimum objectness x class score, 0..1.")
    nms_iou: float = Field(0.45, gt=0, le=1, description="IoU above which a lower-scored box of the same class is removed.")
    classes: list[str] | None = Field(None, min_length=1, description="Class names to keep (None: all classes).")
    intra_op_threads: int = Field(1, ge=1, le=256, description="ONNX Runtime intra-op threads.")
    path: str | None = Field(
        None, description="Local ONNX file of a user model; required for yolov5/yolov8 (for yolox it replaces `model`, never downloaded)."
    )
    class_names: list[str] | str | None = Field(
        None, description="The model's class names in output order: a list, or a text file with one a line (None: the 80 COCO names)."
    )
    max_batch: int = Field(8, ge=1, le=256, description="Frames per session run at most when the model's batch is dynamic.")


class RoiConfig(_Base):
    """How a detection becomes a crop."""

    padding_px: int = Field(4, ge=0, le=512, description="Pixels added on each side of the box before cropping.")
    min_size_px: int = Field(16, ge=1, le=4096, description="Detections whose box is narrower or shorter are not sent.")
    jpeg_quality: int = Field(90, ge=1, le=100, description="JPEG quality of the encoded crop.")
    ttl_ms: float = Field(
        0.0, ge=0, description="Deadline: max age of an ROI, ms from frame capture to start of compute (0: none)."
    )
    policy: RoiPolicyConfig = Field(RoiPolicyConfig(), description="Tracking and which detections are sent.")


class JsonlSinkConfig(_Base):
    """Append one JSON object per result line to a file (created with its folders)."""

    type: Literal["jsonl"] = Field(description="Sink kind.")
    path: str = Field(description="Output file; relative paths are relative to the working directory.")
    mode: Literal["append", "truncate"] = Field("append", description="Keep earlier lines, or start the file afresh.")


class ZmqPubSinkConfig(_Base):
    """Publish each result as a JSON frame on a ZeroMQ PUB socket (topic frame = camera name)."""

    type: Literal["zmq_pub"] = Field(description="Sink kind.")
    endpoint: str = Field(pattern=r"^(tcp|ipc|inproc)://", description="Bind address, e.g. tcp://127.0.0.1:5570.")


SinkConfig = Annotated[Union[JsonlSinkConfig, ZmqPubSinkConfig], Field(discriminator="type")]


class EdgeConfig(_Base):
    """One edge process: reads its cameras, detects, crops and sends ROIs, joins results, writes sinks."""

    brokers: list[Name] = Field(min_length=1, description="Brokers to send ROIs to.")
    detector: DetectorConfig = Field(DetectorConfig(), description="Object detector settings.")
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
    opencv_threads: int = Field(1, ge=0, le=256, description="cv2.setNumThreads for this process (0: OpenCV default).")
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")


# ---------------------------------------------------------------- broker


class BrokerConfig(_Base):
    """One broker process: ROUTER for edges (frontend), ROUTER for workers (backend)."""

    host: str = Field("127.0.0.1", description="Address peers connect to.")
    bind: str | None = Field(None, description="Address the broker binds (default: `host`; `*` for all).")
    frontend_port: Port = Field(description="Port edges connect to.")
    backend_port: Port = Field(description="Port workers connect to.")
    queue_max: int = Field(10_000, ge=1, description="ROIs waiting for worker credit, at most (oldest dropped).")
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")
    max_attempts: int = Field(
        2, ge=1, le=100,
        description="Dispatches of one ROI at most: a dead worker's ROIs are re-dispatched until this many "
        "attempts, then dropped as `worker_lost` (2 = one re-dispatch).",
    )

    def endpoint(self, side: Literal["frontend", "backend"], *, bind: bool = False) -> str:
        """ZeroMQ tcp endpoint of one side, for connecting peers or (``bind=True``) for the broker itself."""
        port = self.frontend_port if side == "frontend" else self.backend_port
        host = (self.bind or self.host) if bind else self.host
        return f"tcp://{host}:{port}"


class HeartbeatConfig(_Base):
    """Liveness between brokers and their peers (Paranoid Pirate pattern, ZeroMQ Guide chapter 4)."""

    interval_s: float = Field(1.0, gt=0, le=60, description="Seconds between heartbeats on every link, both ways.")
    liveness: int = Field(3, ge=1, le=100, description="Intervals without any message after which a peer is dead.")


# ---------------------------------------------------------------- center


class EmbeddingHeadConfig(_Base):
    """L2-normalised embedding matched against an in-memory gallery by cosine similarity."""

    type: Literal["embedding"] = Field("embedding", description="Head kind (registry key).")
    match_threshold: float = Field(0.8, ge=-1, le=1, description="Cosine similarity at or above which an identity matches.")
    max_identities: int = Field(10_000, ge=1, description="Gallery capacity; the least recently seen identity is evicted.")


class TorchRecognizerConfig(_Base):
    """A torch ``nn.Module`` built by a factory, loaded with weights, split into pipeline stages."""

    type: Literal["torch"] = Field(description="Stage runtime (registry key).")
    factory: str = Field(pattern=r"^[\w.]+:[\w.]+$", description="`module:callable` returning the nn.Module.")
    factory_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the factory.")
    weights: str = Field(description="State-dict file path, or package://<distribution>/<file inside it>.")
    input_hw: tuple[int, int] = Field((224, 224), description="Crop resized to (height, width), px.")
    channel_order: Literal["rgb", "bgr"] = Field("rgb", description="Channel order the model expects.")
    mean: tuple[float, float, float] = Field((0.485, 0.456, 0.406), description="Per-channel mean on 0..1 pixels.")
    std: tuple[float, float, float] = Field((0.229, 0.224, 0.225), description="Per-channel std on 0..1 pixels.")
    split_points: list[str] = Field(default_factory=list, description="Submodule names where a new stage begins.")
    head: EmbeddingHeadConfig = Field(EmbeddingHeadConfig(), description="Turns the last stage's output into a result.")


RecognizerConfig = Annotated[Union[TorchRecognizerConfig], Field(discriminator="type")]


class WorkerConfig(_Base):
    """One center worker process: micro-batches ROIs and runs the recognizer as pipeline stages."""

    brokers: list[Name] = Field(min_length=1, description="Brokers to take ROIs from (one socket each).")
    recognizer: Name = Field(description="Name of the recognizer (key under `recognizers`) to run.")
    devices: list[str] = Field(
        min_length=1, description="One device per stage (`cpu`, `cuda:0`, ...); count = split points + 1."
    )
    max_batch: int = Field(16, ge=1, le=4096, description="Micro-batch size at most.")
    max_wait_ms: float = Field(10.0, ge=0, description="A partial micro-batch starts after waiting this long, ms.")
    credits: int = Field(64, ge=1, le=100_000, description="ROIs this worker accepts in flight at once.")
    stage_queue: int = Field(2, ge=1, le=64, description="Micro-batches waiting before each stage, at most.")
    torch_threads: int = Field(1, ge=1, le=256, description="torch.set_num_threads for this process.")
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")


# ---------------------------------------------------------------- security


class CurveConfig(_Base):
    """CurveZMQ encryption and authentication of the tcp links between brokers and their edges and workers.

    Key files are made by ``vcascade keys generate DIR``: ``NAME.key`` (public) and ``NAME.key_secret``
    (secret, mode 0600) per component name. Each host holds only its own ``NAME.key_secret`` and the public
    ``BROKER.key`` of the brokers it connects to; a broker holds the public keys of the clients it accepts.
    """

    enabled: bool = Field(False, description="Encrypt and authenticate every broker link with CurveZMQ.")
    keys_dir: str = Field(
        "keys",
        description="Folder with this host's `NAME.key_secret` and the brokers' public `BROKER.key` files "
        "(relative paths: to the working directory).",
    )
    authorized_dir: str | None = Field(
        None,
        description="Broker side: folder whose `*.key` public keys are the edges and workers allowed to connect "
        "(None: every `*.key` in `keys_dir`).",
    )


class SecurityConfig(_Base):
    """Transport security of the deployment (README, section Security)."""

    curve: CurveConfig = Field(CurveConfig(), description="CurveZMQ on the broker links.")
    allow_plaintext_remote: bool = Field(
        False, description="Allow a broker to bind a non-loopback address with CurveZMQ disabled (trusted networks)."
    )


# ---------------------------------------------------------------- deployment


class Deployment(_Base):
    """The whole deployment file."""

    version: Literal[1] = Field(1, description="Schema version of this file.")
    cameras: dict[Name, CameraConfig] = Field(min_length=1, description="Cameras by name.")
    edges: dict[Name, EdgeConfig] = Field(min_length=1, description="Edge processes by name.")
    brokers: dict[Name, BrokerConfig] = Field(min_length=1, description="Broker processes by name.")
    workers: dict[Name, WorkerConfig] = Field(min_length=1, description="Center worker processes by name.")
    recognizers: dict[Name, RecognizerConfig] = Field(min_length=1, description="Recognition models by name.")
    security: SecurityConfig = Field(SecurityConfig(), description="Transport security (CurveZMQ).")
    heartbeat: HeartbeatConfig = Field(HeartbeatConfig(), description="Heartbeat interval and liveness of every broker link.")

    def cameras_of(self, edge: str) -> dict[str, CameraConfig]:
        """The cameras read by one edge, by name."""
        return {name: cam for name, cam in self.cameras.items() if cam.edge == edge}

    def roi_policy_of(self, camera: str) -> RoiPolicyConfig:
        """The ROI policy of one camera: its own ``roi_policy``, else its edge's ``roi.policy``."""
        cam = self.cameras[camera]
        return cam.roi_policy or self.edges[cam.edge].roi.policy


class ConfigError(Exception):
    """The deployment file is unreadable or invalid. ``str()`` is the user-facing message, one problem a line.

    Recovery: none at run time; the CLI prints the message and exits with code 2.
    """


def load_config(path: str | os.PathLike[str]) -> Deployment:
    """Read, interpolate and validate a deployment file.

    Raises:
        ConfigError: missing file, YAML syntax error, undefined ``${VAR}``, schema violation or bad reference.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    raw = _interpolate(raw, (), path)
    try:
        deployment = Deployment.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("\n".join(f"{path}: {_describe(err)}" for err in exc.errors())) from None
    problems = _check_references(deployment)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))
    return deployment


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(node: Any, loc: tuple[Any, ...], path: Path) -> Any:
    """Replace ``${VAR}`` and ``${VAR:-default}`` inside every string value of the parsed YAML tree."""
    if isinstance(node, dict):
        return {k: _interpolate(v, (*loc, k), path) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, (*loc, i), path) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name, default)
        if value is None:
            raise ConfigError(
                f"{path}: {_dotted(loc)} = {node!r}: environment variable {name} is not set "
                f"(set it, or write ${{{name}:-default}})"
            )
        return value

    return _VAR.sub(substitute, node)


def _dotted(loc: tuple[Any, ...]) -> str:
    """``("edges", "e1", "sinks", 0, "type")`` -> ``edges.e1.sinks[0].type``."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    return text or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    """One line: key path, bad value, what was expected (pydantic's message)."""
    loc = tuple(part for part in err["loc"] if part not in ("jsonl", "zmq_pub", "torch"))  # union tags add noise
    if err["type"] == "missing":
        return f"{_dotted(loc)}: missing (required)"
    if err["type"] == "extra_forbidden":
        return f"{_dotted(loc)}: unknown key (check its spelling; docs/CONFIG.md lists the allowed keys)"
    if err["type"] == "union_tag_invalid":
        ctx = err["ctx"]
        key = ctx["discriminator"].strip("'")
        return f"{_dotted((*loc, key))} = {ctx['tag']!r}: expected one of {ctx['expected_tags']}"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 60 else type(value).__name__
    msg = err["msg"]
    expected = msg.removeprefix("Input should be ") if msg.startswith("Input should be ") else msg[0].lower() + msg[1:]
    if expected.startswith(("less than", "greater than")):
        expected = "a value " + expected
    return f"{_dotted(loc)} = {shown}: expected {expected}"


def _check_references(dep: Deployment) -> list[str]:
    """Cross-field checks pydantic cannot express per field. Returns one message per problem."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.edge not in dep.edges:
            problems.append(f"cameras.{name}.edge = {cam.edge!r}: expected one of the edges {sorted(dep.edges)}")
    for name, edge in dep.edges.items():
        if not dep.cameras_of(name):
            problems.append(f"edges.{name}: no camera uses this edge (set `edge: {name}` on a camera)")
        for i, broker in enumerate(edge.brokers):
            if broker not in dep.brokers:
                problems.append(f"edges.{name}.brokers[{i}] = {broker!r}: expected one of {sorted(dep.brokers)}")
        problems.extend(_check_detector(f"edges.{name}.detector", edge.detector))
        names = _inline_class_names(edge.detector)
        for i, cls in enumerate(edge.roi.policy.classes or []):
            if names is not None and cls not in names:
                problems.append(f"edges.{name}.roi.policy.classes[{i}] = {cls!r}: expected one of the detector's class names")
    for name, cam in dep.cameras.items():
        names = _inline_class_names(dep.edges[cam.edge].detector) if cam.edge in dep.edges else None
        for i, cls in enumerate(cam.roi_policy.classes if cam.roi_policy and cam.roi_policy.classes else []):
            if names is not None and cls not in names:
                problems.append(f"cameras.{name}.roi_policy.classes[{i}] = {cls!r}: expected one of the detector's class names")
    for name, worker in dep.workers.items():
        for i, broker in enumerate(worker.brokers):
            if broker not in dep.brokers:
                problems.append(f"workers.{name}.brokers[{i}] = {broker!r}: expected one of {sorted(dep.brokers)}")
        recognizer = dep.recognizers.get(worker.recognizer)
        if recognizer is None:
            problems.append(
                f"workers.{name}.recognizer = {worker.recognizer!r}: expected one of {sorted(dep.recognizers)}"
            )
        elif len(worker.devices) != len(recognizer.split_points) + 1:
            problems.append(
                f"workers.{name}.devices = {worker.devices}: expected {len(recognizer.split_points) + 1} devices "
                f"(one per stage of recognizer {worker.recognizer!r})"
            )
        for i, device in enumerate(worker.devices):
            if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
                problems.append(f"workers.{name}.devices[{i}] = {device!r}: expected `cpu` or `cuda:N`")
    problems.extend(_check_ports(dep))
    problems.extend(_check_security(dep))
    return problems


def _inline_class_names(det: DetectorConfig) -> list[str] | tuple[str, ...] | None:
    """The detector's class names when the file gives them inline (or COCO by default); None for a names file."""
    if det.class_names is None:
        return COCO_CLASSES
    return None if isinstance(det.class_names, str) else det.class_names


def _check_detector(key: str, det: DetectorConfig) -> list[str]:
    """Detector combinations: a local `path` for user-model types, class names and the class filter."""
    problems = []
    if det.type != "yolox":
        if det.path is None:
            problems.append(f"{key}.path: missing (required for type {det.type}: only yolox models are downloaded)")
        for field in sorted({"model", "url"} & det.model_fields_set):
            problems.append(f"{key}.{field}: only used by type yolox; set `path` to the {det.type} model file")
    elif det.path is not None and {"model", "url"} & det.model_fields_set:
        problems.append(f"{key}.path = {det.path!r}: set either `path` or `model`/`url`, not both")
    names = COCO_CLASSES if det.class_names is None else det.class_names
    if isinstance(names, str):  # a file: read and checked when the edge starts (validation touches no files)
        return problems
    if not names:
        problems.append(f"{key}.class_names = []: expected at least one class name")
    for i, cls in enumerate(names):
        if cls in names[:i]:
            problems.append(f"{key}.class_names[{i}] = {cls!r}: expected each name once")
    for i, cls in enumerate(det.classes or []):
        if cls not in names:
            kind = "a COCO class name" if det.class_names is None else "one of `class_names`"
            problems.append(f"{key}.classes[{i}] = {cls!r}: expected {kind}")
    return problems


def _check_ports(dep: Deployment) -> list[str]:
    """Every TCP port the file's processes bind must be distinct (`vcascade run` puts them on one host)."""
    bound: list[tuple[str, int]] = []
    for name, edge in dep.edges.items():
        bound.append((f"edges.{name}.metrics_port", edge.metrics_port))
    for name, broker in dep.brokers.items():
        bound.append((f"brokers.{name}.metrics_port", broker.metrics_port))
        bound.append((f"brokers.{name}.frontend_port", broker.frontend_port))
        bound.append((f"brokers.{name}.backend_port", broker.backend_port))
    for name, worker in dep.workers.items():
        bound.append((f"workers.{name}.metrics_port", worker.metrics_port))
    seen: dict[int, str] = {}
    problems = []
    for key, port in bound:
        other = seen.setdefault(port, key)
        if other != key:
            problems.append(f"{key} = {port}: expected a port not already used by {other}")
    return problems


def _check_security(dep: Deployment) -> list[str]:
    """A broker reachable from other hosts must not speak plaintext unless the file says so explicitly."""
    if dep.security.curve.enabled or dep.security.allow_plaintext_remote:
        return []
    problems = []
    for name, broker in dep.brokers.items():
        address = broker.bind or broker.host
        if not _is_loopback(address):
            key = "bind" if broker.bind else "host"
            problems.append(
                f"brokers.{name}.{key} = {address!r}: expected a loopback address while security.curve.enabled is "
                "false (enable CurveZMQ, or set security.allow_plaintext_remote: true on a trusted network)"
            )
    return problems


def _is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; ``*``, other names and addresses are remote."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

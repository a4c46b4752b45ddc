"""Deployment configuration: one YAML file describing cameras, edges, brokers, workers and recognizers.

Loaded with :func:`load_config`, which interpolates ``${VAR}`` / ``${VAR:-default}`` in string values, validates
the whole file with pydantic v2 models and then checks cross references (a camera's edge exists, a worker's
recognizer exists, ports are not reused, ...). Every problem becomes a :class:`ConfigError` that names the key
path, the bad value and what was expected; the CLI prints it and exits with code 2, without a traceback.

Validation is pure: no file, device or network is touched except reading the YAML itself (model files are
located at start-up by :mod:`vcascade.models`, not here).
"""

from __future__ import annotations

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


# ---------------------------------------------------------------- cameras


class CameraConfig(_Base):
    """One camera: where its frames come from and which edge process reads it."""

    url: str = Field(description="Video file path, rtsp:// URL, or package://<distribution>/<file> for sample data.")
    edge: Name = Field(description="Name of the edge (key under `edges`) that reads this camera.")
    rtsp_transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport (rtsp:// URLs only).")
    max_frames: int | None = Field(None, ge=1, description="Stop after this many decoded frames (None: to the end).")


# ---------------------------------------------------------------- edge


class DetectorConfig(_Base):
    """The edge's object detector (ONNX Runtime)."""

    type: Literal["yolox"] = Field("yolox", description="Detector family (registry key).")
    model: str = Field("yolox_nano.onnx", description="File name in the model directory, or an absolute path.")
    url: str = Field(YOLOX_NANO_URL, description="Where to download the model when it is not in the model directory.")
    input_size: int = Field(416, ge=32, le=4096, multiple_of=32, description="Square network input side, px.")
    score_threshold: float = Field(0.3, gt=0, le=1, description="Minimum objectness x class score, 0..1.")
    nms_iou: float = Field(0.45, gt=0, le=1, description="IoU above which a lower-scored box of the same class is removed.")
    classes: list[str] | None = Field(None, min_length=1, description="COCO class names to keep (None: all 80).")
    intra_op_threads: int = Field(1, ge=1, le=256, description="ONNX Runtime intra-op threads.")


class RoiConfig(_Base):
    """How a detection becomes a crop."""

    padding_px: int = Field(4, ge=0, le=512, description="Pixels added on each side of the box before cropping.")
    min_size_px: int = Field(16, ge=1, le=4096, description="Detections whose box is narrower or shorter are not sent.")
    jpeg_quality: int = Field(90, ge=1, le=100, description="JPEG quality of the encoded crop.")
    ttl_ms: float = Field(0.0, ge=0, description="Deadline: max ms an ROI may wait before compute (0: none).")


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


# ---------------------------------------------------------------- deployment


class Deployment(_Base):
    """The whole deployment file."""

    version: Literal[1] = Field(1, description="Schema version of this file.")
    cameras: dict[Name, CameraConfig] = Field(min_length=1, description="Cameras by name.")
    edges: dict[Name, EdgeConfig] = Field(min_length=1, description="Edge processes by name.")
    brokers: dict[Name, BrokerConfig] = Field(min_length=1, description="Broker processes by name.")
    workers: dict[Name, WorkerConfig] = Field(min_length=1, description="Center worker processes by name.")
    recognizers: dict[Name, RecognizerConfig] = Field(min_length=1, description="Recognition models by name.")
    heartbeat: HeartbeatConfig = Field(HeartbeatConfig(), description="Heartbeat interval and liveness of every broker link.")

    def cameras_of(self, edge: str) -> dict[str, CameraConfig]:
        """The cameras read by one edge, by name."""
        return {name: cam for name, cam in self.cameras.items() if cam.edge == edge}


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
        for i, cls in enumerate(edge.detector.classes or []):
            if cls not in COCO_CLASSES:
                problems.append(f"edges.{name}.detector.classes[{i}] = {cls!r}: expected a COCO class name")
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

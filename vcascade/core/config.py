"""Deployment configuration: one YAML file describing cameras, edges, brokers, workers and recognizers.

Loaded with :func:`load_config`, which interpolates ``${VAR}`` / ``${VAR:-default}`` in string values,
validates the whole file with the pydantic v2 models of :mod:`vcascade.core.schema` (re-exported here) and then
checks references across sections (:mod:`vcascade.core.schema.checks`: a camera's edge exists, a worker's
recognizer exists, ports are not reused, ...). Every problem becomes a :class:`ConfigError` that names the key
path, the bad value and what was expected (:mod:`vcascade.core.schema.messages`); the CLI prints it and exits
with code 2, without a traceback.

Validation is pure: no file, device or network is touched except reading the YAML itself (model files are
located at start-up by :mod:`vcascade.core.runtime.models`, not here).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from vcascade.core.redact import redact, remember_config
from vcascade.core.schema.checks import check_deployment
from vcascade.core.schema.messages import describe, dotted
from vcascade.core.schema import (  # noqa: F401  (re-exported: the schema is part of this module's API)
    NAME_PATTERN,
    YOLOX_NANO_URL,
    AnalyticsConfig,
    BrokerConfig,
    CalibratedRecognizerConfig,
    CameraConfig,
    CameraViewConfig,
    ClassifierHeadConfig,
    CountingLineConfig,
    CurveConfig,
    Deployment,
    DetectorConfig,
    DetectorConfigBase,
    EdgeConfig,
    EmbeddingHeadConfig,
    FaceRedactionConfig,
    HeadConfig,
    HeartbeatConfig,
    HistoryConfig,
    HistoryLimits,
    IdentitySpaceConfig,
    IdentityStoreConfig,
    JsonlSinkConfig,
    MotionConfig,
    MqttSinkConfig,
    Name,
    OnnxRecognizerConfig,
    OcrRecognizerConfig,
    PostgresHistoryStoreConfig,
    Port,
    PrivacyConfig,
    RecognizerConfig,
    RedisStoreConfig,
    RoiConfig,
    RoiPolicyConfig,
    RouteConfig,
    SecurityConfig,
    SinkConfig,
    SqliteHistoryStoreConfig,
    SqliteStoreConfig,
    StageGroupConfig,
    SupervisionConfig,
    TextHeadConfig,
    TextRedactionConfig,
    TopologyConfig,
    TopologyLinkConfig,
    TorchRecognizerConfig,
    TrackerConfig,
    MetricsConfig,
    UiConfig,
    WebhookSinkConfig,
    WorkerConfig,
    Yolov5DetectorConfig,
    Yolov8DetectorConfig,
    YoloxDetectorConfig,
    ZmqPubSinkConfig,
    ZoneConfig,
)


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
    raw = _interpolate(_read_yaml(path), (), path)
    remember_config(raw)  # every later output hides these secrets (vcascade.core.redact)
    try:
        deployment = Deployment.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(redact("\n".join(f"{path}: {describe(err)}" for err in exc.errors()))) from None
    problems = check_deployment(deployment)
    if problems:
        raise ConfigError(redact("\n".join(f"{path}: {p}" for p in problems)))
    return deployment


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's YAML mapping.

    Raises:
        ConfigError: unreadable file, YAML syntax error, or a top level that is not a mapping.
    """
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
    return raw


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
                f"{path}: {dotted(loc)} = {node!r}: environment variable {name} is not set "
                f"(set it, or write ${{{name}:-default}})"
            )
        return value

    return _VAR.sub(substitute, node)

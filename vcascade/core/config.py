"""Deployment configuration: one YAML file describing cameras, edges, brokers, workers and recognizers.

Loaded with :func:`load_config`, which interpolates ``${VAR}`` / ``${VAR:-default}`` in string values,
validates the whole file with the pydantic v2 models of :mod:`vcascade.core.schema` (re-exported here) and then
checks cross references (a camera's edge exists, a worker's recognizer exists, ports are not reused, ...). Every problem becomes a :class:`ConfigError` that names the key
path, the bad value and what was expected; the CLI prints it and exits with code 2, without a traceback.

Validation is pure: no file, device or network is touched except reading the YAML itself (model files are
located at start-up by :mod:`vcascade.core.models`, not here).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.schema import (  # noqa: F401  (re-exported: the schema is part of this module's API)
    NAME_PATTERN,
    YOLOX_NANO_URL,
    BrokerConfig,
    CameraConfig,
    ClassifierHeadConfig,
    CurveConfig,
    Deployment,
    DetectorConfig,
    EdgeConfig,
    EmbeddingHeadConfig,
    HeadConfig,
    HeartbeatConfig,
    JsonlSinkConfig,
    Name,
    OnnxRecognizerConfig,
    Port,
    RecognizerConfig,
    RoiConfig,
    RoiPolicyConfig,
    RouteConfig,
    SecurityConfig,
    SinkConfig,
    StageGroupConfig,
    TextHeadConfig,
    TorchRecognizerConfig,
    TrackerConfig,
    WorkerConfig,
    ZmqPubSinkConfig,
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
    loc = tuple(part for part in err["loc"] if part not in ("jsonl", "zmq_pub", "torch", "onnx"))  # union tags add noise
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
        elif worker.downstream is not None:
            problems.extend(_check_downstream(dep, name))
        elif recognizer.split_points != "auto" and len(worker.devices) != len(recognizer.split_points) + 1:
            problems.append(
                f"workers.{name}.devices = {worker.devices}: expected {len(recognizer.split_points) + 1} devices "
                f"(one per stage of recognizer {worker.recognizer!r})"
            )
        for i, device in enumerate(worker.devices):
            if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
                problems.append(f"workers.{name}.devices[{i}] = {device!r}: expected `cpu` or `cuda:N`")
    problems.extend(_check_routing(dep))
    for name, recognizer in dep.recognizers.items():
        problems.extend(_check_recognizer(f"recognizers.{name}", recognizer))
    problems.extend(_check_stage_groups(dep))
    problems.extend(_check_ports(dep))
    problems.extend(_check_security(dep))
    problems.extend(_check_heads(dep))
    return problems


def _check_heads(dep: Deployment) -> list[str]:
    """Head settings that depend on their recognizer: ``charset: model`` reads the recognizer's ONNX ``model``."""
    problems = []
    for name, rec in dep.recognizers.items():
        if rec.head.type == "text" and rec.head.charset == "model" and getattr(rec, "model", None) is None:
            problems.append(
                f"recognizers.{name}.head.charset = 'model': a {rec.type} recognizer has no ONNX `model` to read "
                "the characters from; give a character file or a list"
            )
    return problems


def _check_routing(dep: Deployment) -> list[str]:
    """Routes name recognizers some worker on the edge's brokers runs; several such recognizers need routes."""
    problems = []
    for name, edge in dep.edges.items():
        served = dep.recognizers_served(name)
        names = _inline_class_names(edge.detector)
        if edge.roi.routes:
            problems.extend(_check_routes(f"edges.{name}.roi.routes", edge.roi.routes, dep, served, names))
        elif len(served) > 1 and any(cam.routes is None for cam in dep.cameras_of(name).values()):
            problems.append(
                f"edges.{name}.roi.routes: missing (required: workers on its brokers run several recognizers "
                f"{served}; route each class to one, e.g. `- {{recognizer: {served[0]}, classes: [person]}}`)"
            )
    for name, cam in dep.cameras.items():
        if cam.routes and cam.edge in dep.edges:
            names = _inline_class_names(dep.edges[cam.edge].detector)
            served = dep.recognizers_served(cam.edge)
            problems.extend(_check_routes(f"cameras.{name}.routes", cam.routes, dep, served, names))
    return problems


def _check_routes(
    key: str, routes: list[RouteConfig], dep: Deployment, served: list[str], names: list[str] | tuple[str, ...] | None
) -> list[str]:
    """One list of routes: known recognizers served to the edge, known classes, no route that can never match."""
    problems, routed, catch_all = [], {}, None
    for i, route in enumerate(routes):
        if catch_all is not None:
            problems.append(f"{key}[{i}]: never used (routes[{catch_all}] has no `classes` and takes every class)")
        if route.recognizer not in dep.recognizers:
            problems.append(f"{key}[{i}].recognizer = {route.recognizer!r}: expected one of {sorted(dep.recognizers)}")
        elif route.recognizer not in served:
            problems.append(
                f"{key}[{i}].recognizer = {route.recognizer!r}: expected a recognizer run by a worker on the edge's "
                f"brokers ({served or 'none'})"
            )
        if route.classes is None:
            catch_all = i if catch_all is None else catch_all
        for j, cls in enumerate(route.classes or []):
            if names is not None and cls not in names:
                problems.append(f"{key}[{i}].classes[{j}] = {cls!r}: expected one of the detector's class names")
            elif cls in routed:
                problems.append(f"{key}[{i}].classes[{j}] = {cls!r}: already routed by routes[{routed[cls]}]")
            routed.setdefault(cls, i)
    return problems


def _check_recognizer(key: str, rec: RecognizerConfig) -> list[str]:
    """A torch recognizer is either ``factory`` + ``weights`` or a ``program``; split points are distinct."""
    problems = []
    if rec.type == "torch":
        if rec.program is not None and (rec.factory or rec.weights):
            problems.append(f"{key}.program = {rec.program!r}: set either `program` or `factory` + `weights`, not both")
        elif rec.program is None and not (rec.factory and rec.weights):
            missing = "factory" if not rec.factory else "weights"
            problems.append(f"{key}.{missing}: missing (a torch recognizer needs `factory` + `weights`, or `program`)")
    if rec.split_points != "auto":
        for i, point in enumerate(rec.split_points):
            if point in rec.split_points[:i]:
                problems.append(f"{key}.split_points[{i}] = {point!r}: expected each split point once")
    return problems


def _check_downstream(dep: Deployment, name: str) -> list[str]:
    """A worker with a stage group: the group exists and worker + group devices = the recognizer's stages."""
    worker = dep.workers[name]
    group = dep.stage_groups.get(worker.downstream)
    if group is None:
        return [f"workers.{name}.downstream = {worker.downstream!r}: expected one of the stage_groups {sorted(dep.stage_groups)}"]
    split_points = dep.recognizers[worker.recognizer].split_points
    if split_points == "auto":
        return [
            f"recognizers.{worker.recognizer}.split_points = 'auto': expected explicit split points for a recognizer "
            f"split across processes (workers.{name}.downstream = {worker.downstream!r}; `vcascade plan` suggests them)"
        ]
    stages = len(split_points) + 1
    if len(worker.devices) + len(group.devices) != stages:
        return [
            f"workers.{name}.devices = {worker.devices} + stage_groups.{worker.downstream}.devices = {group.devices}: "
            f"expected {stages} devices in all (one per stage of recognizer {worker.recognizer!r}; the worker runs "
            f"the first stages, the group the rest)"
        ]
    return []


def _check_stage_groups(dep: Deployment) -> list[str]:
    """Each stage group serves at least one worker, all of them splitting the same recognizer at the same stage."""
    problems = []
    for name, group in dep.stage_groups.items():
        users = {(w.recognizer, len(w.devices)) for w in dep.workers.values() if w.downstream == name}
        if not users:
            problems.append(f"stage_groups.{name}: no worker uses this group (set `downstream: {name}` on a worker)")
        elif len(users) > 1:
            problems.append(f"stage_groups.{name}: its workers differ in recognizer or in stages run locally ({sorted(users)})")
        for i, device in enumerate(group.devices):
            if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
                problems.append(f"stage_groups.{name}.devices[{i}] = {device!r}: expected `cpu` or `cuda:N`")
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
        if edge.control_port is not None:
            bound.append((f"edges.{name}.control_port", edge.control_port))
    for name, broker in dep.brokers.items():
        bound.append((f"brokers.{name}.metrics_port", broker.metrics_port))
        bound.append((f"brokers.{name}.frontend_port", broker.frontend_port))
        bound.append((f"brokers.{name}.backend_port", broker.backend_port))
    for name, worker in dep.workers.items():
        bound.append((f"workers.{name}.metrics_port", worker.metrics_port))
    for name, group in dep.stage_groups.items():
        bound.append((f"stage_groups.{name}.metrics_port", group.metrics_port))
        bound.append((f"stage_groups.{name}.port", group.port))
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
    for name, edge in dep.edges.items():
        address = edge.bind or edge.host
        if edge.control_port is not None and not _is_loopback(address):
            key = "bind" if edge.bind else "host"
            problems.append(
                f"edges.{name}.{key} = {address!r}: expected a loopback address for the control socket while "
                "security.curve.enabled is false (enable CurveZMQ, or set security.allow_plaintext_remote: true)"
            )
    for name, group in dep.stage_groups.items():
        if not _is_loopback(group.bind or group.host):
            problems.append(
                f"stage_groups.{name}.{'bind' if group.bind else 'host'} = {group.bind or group.host!r}: expected a "
                "loopback address while security.curve.enabled is false (enable CurveZMQ, or set "
                "security.allow_plaintext_remote: true on a trusted network)"
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

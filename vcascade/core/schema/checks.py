"""Checks across the sections of a validated deployment file, which pydantic cannot express per field.

:func:`check_deployment` runs one function per section (cameras, edges, workers, routes, recognizers, heads,
stage groups, ports, security); each returns its problems as one-line messages naming the key path, the bad
value and what was expected. They are pure: no file, device or network is touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.schema import (
    BrokerConfig,
    Deployment,
    DetectorConfig,
    EdgeConfig,
    RecognizerConfig,
    RouteConfig,
    StageGroupConfig,
    identity_problems,
    is_loopback,
    ui_problems,
)

DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?")
"""A stage device: ``cpu``, ``cuda`` or ``cuda:N``."""


def check_deployment(dep: Deployment) -> list[str]:
    """Every cross-section problem of ``dep``, one message each, section by section (empty: the file is good)."""
    checks = (
        _check_cameras, _check_edges, _check_camera_policies, _check_camera_analytics, _check_workers,
        _check_routing, _check_recognizers, _check_stage_groups, _check_ports, _check_security, _check_heads,
        ui_problems, identity_problems,
    )
    return [problem for check in checks for problem in check(dep)]


# ---------------------------------------------------------------- cameras and edges


def _check_cameras(dep: Deployment) -> list[str]:
    """Each camera names an existing edge."""
    return [
        f"cameras.{name}.edge = {cam.edge!r}: expected one of the edges {sorted(dep.edges)}"
        for name, cam in dep.cameras.items()
        if cam.edge not in dep.edges
    ]


def _check_edges(dep: Deployment) -> list[str]:
    """Each edge reads a camera, sends to existing brokers, has a consistent detector and ROI class filter."""
    problems = []
    for name, edge in dep.edges.items():
        if not dep.cameras_of(name):
            problems.append(f"edges.{name}: no camera uses this edge (set `edge: {name}` on a camera)")
        problems += _check_broker_names(f"edges.{name}.brokers", edge.brokers, dep)
        problems += _check_detector(f"edges.{name}.detector", edge.detector)
        problems += _check_class_filter(
            f"edges.{name}.roi.policy.classes", edge.roi.policy.classes, _inline_class_names(edge.detector)
        )
    return problems


def _check_camera_policies(dep: Deployment) -> list[str]:
    """A camera's own ROI policy filters only classes its edge's detector has."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.roi_policy is not None and cam.edge in dep.edges:
            names = _inline_class_names(dep.edges[cam.edge].detector)
            problems += _check_class_filter(f"cameras.{name}.roi_policy.classes", cam.roi_policy.classes, names)
    return problems


def _check_camera_analytics(dep: Deployment) -> list[str]:
    """A camera's counting lines and zones count only classes its edge's detector has."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.analytics is not None and cam.edge in dep.edges:
            names = _inline_class_names(dep.edges[cam.edge].detector)
            for kind, items in (("lines", cam.analytics.lines), ("zones", cam.analytics.zones)):
                for i, item in enumerate(items):
                    problems += _check_class_filter(f"cameras.{name}.analytics.{kind}[{i}].classes", item.classes, names)
    return problems


def _check_broker_names(key: str, brokers: list[str], dep: Deployment) -> list[str]:
    """Each name of an edge's or worker's ``brokers`` list is a broker of the file."""
    return [
        f"{key}[{i}] = {broker!r}: expected one of {sorted(dep.brokers)}"
        for i, broker in enumerate(brokers)
        if broker not in dep.brokers
    ]


def _check_class_filter(
    key: str,
    classes: list[str] | None,
    names: Sequence[str] | None,
    expected: str = "one of the detector's class names",
) -> list[str]:
    """A class filter (an ROI policy's or the detector's ``classes``) picks among the detector's class names
    (unchecked when they come from a file)."""
    if names is None:
        return []
    return [f"{key}[{i}] = {cls!r}: expected {expected}" for i, cls in enumerate(classes or []) if cls not in names]


# ---------------------------------------------------------------- detector


def _inline_class_names(det: DetectorConfig) -> Sequence[str] | None:
    """The detector's class names when the file gives them inline (or COCO by default); None for a names file."""
    if det.class_names is None:
        return COCO_CLASSES
    return None if isinstance(det.class_names, str) else det.class_names


def _check_detector(key: str, det: DetectorConfig) -> list[str]:
    """The detector's class names are distinct and its class filter picks among them.

    A names file is read and checked when the edge starts (validation touches no files). What differs between
    detector types (a required ``path``, YOLOX's ``model``/``url``) is the schema's business.
    """
    names = _inline_class_names(det)
    if names is None:
        return []
    expected = "a COCO class name" if det.class_names is None else "one of `class_names`"
    return [
        *_check_class_names(f"{key}.class_names", names),
        *_check_class_filter(f"{key}.classes", det.classes, names, expected),
    ]


def _check_class_names(key: str, names: Sequence[str]) -> list[str]:
    """A detector's inline class names: at least one, each once."""
    problems = [f"{key} = []: expected at least one class name"] if not names else []
    twice = [f"{key}[{i}] = {cls!r}: expected each name once" for i, cls in enumerate(names) if cls in names[:i]]
    return problems + twice


# ---------------------------------------------------------------- workers and stage groups


def _check_workers(dep: Deployment) -> list[str]:
    """Each worker takes ROIs from existing brokers and runs an existing recognizer on one device per stage."""
    problems = []
    for name, worker in dep.workers.items():
        problems += _check_broker_names(f"workers.{name}.brokers", worker.brokers, dep)
        problems += _check_worker_stages(dep, name)
        problems += _check_devices(f"workers.{name}.devices", worker.devices)
    return problems


def _check_worker_stages(dep: Deployment, name: str) -> list[str]:
    """The worker's recognizer exists and its devices (with its stage group's) cover the recognizer's stages."""
    worker = dep.workers[name]
    recognizer = dep.recognizers.get(worker.recognizer)
    if recognizer is None:
        return [f"workers.{name}.recognizer = {worker.recognizer!r}: expected one of {sorted(dep.recognizers)}"]
    if worker.downstream is not None:
        return _check_downstream(dep, name)
    if recognizer.split_points != "auto" and len(worker.devices) != len(recognizer.split_points) + 1:
        return [
            f"workers.{name}.devices = {worker.devices}: expected {len(recognizer.split_points) + 1} devices "
            f"(one per stage of recognizer {worker.recognizer!r})"
        ]
    return []


def _check_devices(key: str, devices: list[str]) -> list[str]:
    """Each device of a worker or stage group is ``cpu`` or ``cuda:N``."""
    return [
        f"{key}[{i}] = {device!r}: expected `cpu` or `cuda:N`"
        for i, device in enumerate(devices)
        if not DEVICE_PATTERN.fullmatch(device)
    ]


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
        problems += _check_devices(f"stage_groups.{name}.devices", group.devices)
    return problems


# ---------------------------------------------------------------- routes


def _check_routing(dep: Deployment) -> list[str]:
    """Routes name recognizers some worker on the edge's brokers runs; several such recognizers need routes."""
    return [*_check_edge_routes(dep), *_check_camera_routes(dep)]


def _check_edge_routes(dep: Deployment) -> list[str]:
    """Each edge's ``roi.routes``, required when its brokers' workers run several recognizers (unless each of
    its cameras has routes of its own)."""
    problems = []
    for name, edge in dep.edges.items():
        served = dep.recognizers_served(name)
        if edge.roi.routes:
            names = _inline_class_names(edge.detector)
            problems += _check_routes(f"edges.{name}.roi.routes", edge.roi.routes, dep, served, names)
        elif len(served) > 1 and any(cam.routes is None for cam in dep.cameras_of(name).values()):
            problems.append(
                f"edges.{name}.roi.routes: missing (required: workers on its brokers run several recognizers "
                f"{served}; route each class to one, e.g. `- {{recognizer: {served[0]}, classes: [person]}}`)"
            )
    return problems


def _check_camera_routes(dep: Deployment) -> list[str]:
    """Each camera's own ``routes``, against its edge's detector and served recognizers."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.routes and cam.edge in dep.edges:
            names = _inline_class_names(dep.edges[cam.edge].detector)
            served = dep.recognizers_served(cam.edge)
            problems += _check_routes(f"cameras.{name}.routes", cam.routes, dep, served, names)
    return problems


def _check_routes(
    key: str, routes: list[RouteConfig], dep: Deployment, served: list[str], names: Sequence[str] | None
) -> list[str]:
    """One list of routes: known recognizers served to the edge, known classes, no route that can never match."""
    problems: list[str] = []
    routed: dict[str, int] = {}
    catch_all = None
    for i, route in enumerate(routes):
        if catch_all is not None:
            problems.append(f"{key}[{i}]: never used (routes[{catch_all}] has no `classes` and takes every class)")
        problems += _check_route_recognizer(f"{key}[{i}].recognizer", route.recognizer, dep, served)
        if route.classes is None:
            catch_all = i if catch_all is None else catch_all
        problems += _check_route_classes(f"{key}[{i}].classes", route.classes or [], i, routed, names)
    return problems


def _check_route_recognizer(key: str, recognizer: str, dep: Deployment, served: list[str]) -> list[str]:
    """A route's recognizer exists and a worker on the edge's brokers runs it."""
    if recognizer not in dep.recognizers:
        return [f"{key} = {recognizer!r}: expected one of {sorted(dep.recognizers)}"]
    if recognizer not in served:
        return [
            f"{key} = {recognizer!r}: expected a recognizer run by a worker on the edge's brokers ({served or 'none'})"
        ]
    return []


def _check_route_classes(
    key: str, classes: list[str], index: int, routed: dict[str, int], names: Sequence[str] | None
) -> list[str]:
    """Route ``index``'s classes are detector class names not routed by an earlier route (``routed``: class ->
    first route taking it, updated here)."""
    problems = []
    for j, cls in enumerate(classes):
        if names is not None and cls not in names:
            problems.append(f"{key}[{j}] = {cls!r}: expected one of the detector's class names")
        elif cls in routed:
            problems.append(f"{key}[{j}] = {cls!r}: already routed by routes[{routed[cls]}]")
        routed.setdefault(cls, index)
    return problems


# ---------------------------------------------------------------- recognizers and heads


def _check_recognizers(dep: Deployment) -> list[str]:
    """Each recognizer's model source and split points."""
    problems = []
    for name, rec in dep.recognizers.items():
        problems += _check_torch_source(f"recognizers.{name}", rec)
        problems += _check_split_points(f"recognizers.{name}.split_points", rec.split_points)
    return problems


def _check_torch_source(key: str, rec: RecognizerConfig) -> list[str]:
    """A torch recognizer is either ``factory`` + ``weights`` or a ``program``."""
    if rec.type != "torch":
        return []
    if rec.program is not None and (rec.factory or rec.weights):
        return [f"{key}.program = {rec.program!r}: set either `program` or `factory` + `weights`, not both"]
    if rec.program is None and not (rec.factory and rec.weights):
        missing = "factory" if not rec.factory else "weights"
        return [f"{key}.{missing}: missing (a torch recognizer needs `factory` + `weights`, or `program`)"]
    return []


def _check_split_points(key: str, split_points: list[str] | str) -> list[str]:
    """Explicit split points are distinct."""
    if split_points == "auto":
        return []
    return [
        f"{key}[{i}] = {point!r}: expected each split point once"
        for i, point in enumerate(split_points)
        if point in split_points[:i]
    ]


def _check_heads(dep: Deployment) -> list[str]:
    """Head settings that depend on their recognizer: ``charset: model`` reads the recognizer's ONNX ``model``."""
    return [
        f"recognizers.{name}.head.charset = 'model': a {rec.type} recognizer has no ONNX `model` to read "
        "the characters from; give a character file or a list"
        for name, rec in dep.recognizers.items()
        if rec.head.type == "text" and rec.head.charset == "model" and getattr(rec, "model", None) is None
    ]


# ---------------------------------------------------------------- ports and security


def bound_ports(dep: Deployment) -> Iterator[tuple[str, int]]:
    """(key, port) of every TCP port the file's processes bind, in file order."""
    for name, edge in dep.edges.items():
        yield f"edges.{name}.metrics_port", edge.metrics_port
        if edge.control_port is not None:
            yield f"edges.{name}.control_port", edge.control_port
        if edge.preview_port is not None:
            yield f"edges.{name}.preview_port", edge.preview_port
    for name, broker in dep.brokers.items():
        yield f"brokers.{name}.metrics_port", broker.metrics_port
        yield f"brokers.{name}.frontend_port", broker.frontend_port
        yield f"brokers.{name}.backend_port", broker.backend_port
    for name, worker in dep.workers.items():
        yield f"workers.{name}.metrics_port", worker.metrics_port
    for name, group in dep.stage_groups.items():
        yield f"stage_groups.{name}.metrics_port", group.metrics_port
        yield f"stage_groups.{name}.port", group.port
    if dep.ui.enabled:  # `vcascade run` serves the view on this host
        yield "ui.port", dep.ui.port


def _check_ports(dep: Deployment) -> list[str]:
    """Every TCP port the file's processes bind must be distinct (`vcascade run` puts them on one host)."""
    seen: dict[int, str] = {}
    problems = []
    for key, port in bound_ports(dep):
        other = seen.setdefault(port, key)
        if other != key:
            problems.append(f"{key} = {port}: expected a port not already used by {other}")
    return problems


_LOOPBACK_REASON = (
    "expected a loopback address while security.curve.enabled is false (enable CurveZMQ, or set "
    "security.allow_plaintext_remote: true on a trusted network)"
)


def _check_security(dep: Deployment) -> list[str]:
    """A broker, control socket or stage group reachable from other hosts must not speak plaintext unless the
    file says so explicitly."""
    if dep.security.curve.enabled or dep.security.allow_plaintext_remote:
        return []
    controlled = {name: edge for name, edge in dep.edges.items() if edge.control_port is not None}
    control_reason = (
        "expected a loopback address for the control socket while security.curve.enabled is false (enable "
        "CurveZMQ, or set security.allow_plaintext_remote: true)"
    )
    return [
        *_check_loopback("brokers", dep.brokers, _LOOPBACK_REASON),
        *_check_loopback("edges", controlled, control_reason),
        *_check_loopback("stage_groups", dep.stage_groups, _LOOPBACK_REASON),
        *_check_pub_sinks(dep),
    ]


def _check_pub_sinks(dep: Deployment) -> list[str]:
    """ZeroMQ PUB sinks bound to a non-loopback tcp address (``*``, an interface, another host's address): any
    host could subscribe to every result in plaintext."""
    problems = []
    for name, edge in dep.edges.items():
        for index, sink in enumerate(edge.sinks):
            if sink.type != "zmq_pub" or not sink.endpoint.startswith("tcp://"):
                continue
            host = sink.endpoint.removeprefix("tcp://").rpartition(":")[0]
            if not is_loopback(host):
                problems.append(
                    f"edges.{name}.sinks[{index}].endpoint = {sink.endpoint!r}: expected a loopback address while "
                    "security.curve.enabled is false (enable CurveZMQ, or set security.allow_plaintext_remote: true "
                    "on a trusted network)"
                )
    return problems


def _check_loopback(
    section: str, processes: Mapping[str, BrokerConfig | EdgeConfig | StageGroupConfig], reason: str
) -> list[str]:
    """Processes of one section whose bound address (``bind``, else ``host``) is not a loopback address."""
    problems = []
    for name, process in processes.items():
        address = process.bind or process.host
        if not is_loopback(address):
            problems.append(f"{section}.{name}.{'bind' if process.bind else 'host'} = {address!r}: {reason}")
    return problems


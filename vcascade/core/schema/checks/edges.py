"""Cross-section checks of cameras and edges: a camera's edge exists, an edge's brokers exist, class filters
and routes pick among the detector's class names, routes name recognizers a worker on the edge's brokers runs."""

from __future__ import annotations

from collections.abc import Sequence

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.schema.deployment import Deployment
from vcascade.core.schema.detector import DetectorConfig
from vcascade.core.schema.edge import RouteConfig

# ---------------------------------------------------------------- cameras and edges


def check_cameras(dep: Deployment) -> list[str]:
    """Each camera names an existing edge."""
    return [
        f"cameras.{name}.edge = {cam.edge!r}: expected one of the edges {sorted(dep.edges)}"
        for name, cam in dep.cameras.items()
        if cam.edge not in dep.edges
    ]


def check_edges(dep: Deployment) -> list[str]:
    """Each edge reads a camera, sends to existing brokers, has a consistent detector and ROI class filter."""
    problems = []
    for name, edge in dep.edges.items():
        if not dep.cameras_of(name):
            problems.append(f"edges.{name}: no camera uses this edge (set `edge: {name}` on a camera)")
        problems += broker_name_problems(f"edges.{name}.brokers", edge.brokers, dep)
        problems += _check_detector(f"edges.{name}.detector", edge.detector)
        problems += _check_class_filter(
            f"edges.{name}.roi.policy.classes", edge.roi.policy.classes, inline_class_names(edge.detector)
        )
    return problems


def check_camera_policies(dep: Deployment) -> list[str]:
    """A camera's own ROI policy filters only classes its edge's detector has."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.roi_policy is not None and cam.edge in dep.edges:
            names = inline_class_names(dep.edges[cam.edge].detector)
            problems += _check_class_filter(f"cameras.{name}.roi_policy.classes", cam.roi_policy.classes, names)
    return problems


def check_camera_analytics(dep: Deployment) -> list[str]:
    """A camera's counting lines and zones count only classes its edge's detector has."""
    problems = []
    for name, cam in dep.cameras.items():
        if cam.analytics is not None and cam.edge in dep.edges:
            names = inline_class_names(dep.edges[cam.edge].detector)
            for kind, items in (("lines", cam.analytics.lines), ("zones", cam.analytics.zones)):
                for i, item in enumerate(items):
                    problems += _check_class_filter(f"cameras.{name}.analytics.{kind}[{i}].classes", item.classes, names)
    return problems


def broker_name_problems(key: str, brokers: list[str], dep: Deployment) -> list[str]:
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


def inline_class_names(det: DetectorConfig) -> Sequence[str] | None:
    """The detector's class names when the file gives them inline (or COCO by default); None for a names file."""
    if det.class_names is None:
        return COCO_CLASSES
    return None if isinstance(det.class_names, str) else det.class_names


def _check_detector(key: str, det: DetectorConfig) -> list[str]:
    """The detector's class names are distinct and its class filter picks among them.

    A names file is read and checked when the edge starts (validation touches no files). What differs between
    detector types (a required ``path``, YOLOX's ``model``/``url``) is the schema's business.
    """
    names = inline_class_names(det)
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


# ---------------------------------------------------------------- routes


def check_routing(dep: Deployment) -> list[str]:
    """Routes name recognizers some worker on the edge's brokers runs; several such recognizers need routes."""
    return [*_check_edge_routes(dep), *_check_camera_routes(dep)]


def _check_edge_routes(dep: Deployment) -> list[str]:
    """Each edge's ``roi.routes``, required when its brokers' workers run several recognizers (unless each of
    its cameras has routes of its own)."""
    problems = []
    for name, edge in dep.edges.items():
        served = dep.recognizers_served(name)
        if edge.roi.routes:
            names = inline_class_names(edge.detector)
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
            names = inline_class_names(dep.edges[cam.edge].detector)
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


"""Cross-section checks of the center: workers and stage groups against their recognizers and devices,
recognizers' model sources and split points, heads that depend on their recognizer, identity topology links
against the cameras."""

from __future__ import annotations

import re

from vcascade.core.schema.center import RecognizerConfig
from vcascade.core.schema.checks.edges import broker_name_problems
from vcascade.core.schema.deployment import Deployment

DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?")
"""A stage device: ``cpu``, ``cuda`` or ``cuda:N``."""

# ---------------------------------------------------------------- workers and stage groups


def check_workers(dep: Deployment) -> list[str]:
    """Each worker takes ROIs from existing brokers and runs an existing recognizer on one device per stage."""
    problems = []
    for name, worker in dep.workers.items():
        problems += broker_name_problems(f"workers.{name}.brokers", worker.brokers, dep)
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


def check_stage_groups(dep: Deployment) -> list[str]:
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


# ---------------------------------------------------------------- recognizers and heads


def check_recognizers(dep: Deployment) -> list[str]:
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


def check_heads(dep: Deployment) -> list[str]:
    """Head settings that depend on their recognizer: ``charset: model`` reads the recognizer's ONNX ``model``."""
    return [
        f"recognizers.{name}.head.charset = 'model': a {rec.type} recognizer has no ONNX `model` to read "
        "the characters from; give a character file or a list"
        for name, rec in dep.recognizers.items()
        if rec.head.type == "text" and rec.head.charset == "model" and getattr(rec, "model", None) is None
    ]


def check_topology(dep: Deployment) -> list[str]:
    """Topology links naming a camera the deployment does not have (one message per bad ``source``/``target``).

    A misspelt camera matches no ROI's camera, so the link would silently do nothing useful, and the real camera
    at its other end, now named in a link, would be pruned: its ROIs would never be compared with identities
    last seen on the camera meant. The message names the key path, e.g.
    ``recognizers.embedder.head.identity.topology.links[0].source = 'street-9': expected one of the cameras [...]``.
    """
    problems = []
    for name, rec in dep.recognizers.items():
        topology = rec.head.identity.topology if rec.head.type == "embedding" else None
        for i, link in enumerate(topology.links if topology else []):
            for end in ("source", "target"):
                camera = getattr(link, end)
                if camera not in dep.cameras:
                    problems.append(
                        f"recognizers.{name}.head.identity.topology.links[{i}].{end} = {camera!r}: expected one of "
                        f"the cameras {sorted(dep.cameras)}"
                    )
    return problems

"""Pre-flight checks of a deployment on this host: every problem ``vcascade run`` would otherwise meet late.

``vcascade check FILE --deep`` runs all of them; ``vcascade run`` runs the port and model parts before it starts any
process.
Each check returns one line per problem, naming the key path of the file it is about:

* models (:func:`vcascade.app.preflight_models.model_problems`): each edge's detector model is found (or fetched,
  as ``run`` would) and loaded, and its inputs and outputs fit the configured type (:mod:`vcascade.edge.detection.contract`); each ONNX
  recognizer's model file is found (the PP-OCR text model fetched once, :mod:`vcascade.center.stages.ocr_models`).
* split points (:func:`split_point_problems`): each recognizer is loaded and, with explicit split points, split
  into its stages on the CPU (a split point the model does not have is found here, not in a worker's restarts).
* cameras (:func:`camera_problems`): each camera is opened and its first frame decoded, with a timeout
  (:func:`vcascade.edge.capture.probe.probe_camera`).
* key files (:func:`key_problems`): with CurveZMQ on, each component's key files load and each broker and stage
  group admits the keys of its clients (as ``vcascade keys check``).
* ports (:func:`port_problems`): each TCP port the file's processes bind is free on this host now.

This module loads ONNX Runtime, OpenCV and torch; ``vcascade check`` without ``--deep`` never imports it.
"""

from __future__ import annotations

import os

from vcascade.app.preflight_models import MODEL_ERRORS, model_problems, onnx_file_problem
from vcascade.app.preflight_ports import taken_ports
from vcascade.center.stages.runtimes import runtime_of
from vcascade.core.config import Deployment
from vcascade.core.transport.keys import component_names
from vcascade.core.transport.security import SecurityError, check_keys
from vcascade.core.transport.zap import check_roles
from vcascade.edge.capture.probe import probe_camera
from vcascade.edge.capture.url_policy import allow_hosts


def deep_problems(dep: Deployment, model_dir: str | os.PathLike[str] | None, camera_timeout_s: float) -> list[str]:
    """Every check of this module, in the order models, split points, cameras, key files, ports."""
    return [
        *model_problems(dep, model_dir), *split_point_problems(dep, model_dir),
        *camera_problems(dep, camera_timeout_s), *key_problems(dep), *port_problems(dep),
    ]  # fmt: skip


def split_point_problems(dep: Deployment, model_dir: str | os.PathLike[str] | None) -> list[str]:
    """One line per recognizer that does not load, or (explicit ``split_points``) does not split there. Recognizers
    whose model file is missing are left to :func:`model_problems` (one line per problem)."""
    problems = []
    for name, rec in dep.recognizers.items():
        if onnx_file_problem(name, rec, model_dir):
            continue
        runtime = runtime_of(rec)
        try:
            model = runtime.load_model(rec, str(model_dir) if model_dir else None)
            if rec.split_points != "auto":
                runtime.build(model, rec, rec.split_points, ["cpu"] * (len(rec.split_points) + 1))
        except (*MODEL_ERRORS, RuntimeError) as exc:
            problems.append(f"recognizers.{name}: {type(exc).__name__}: {exc}")
    return problems


def camera_problems(dep: Deployment, timeout_s: float) -> list[str]:
    """One line per camera that cannot be opened or decoded within ``timeout_s`` seconds: its reason and detail."""
    problems = []
    try:
        for name, cam in dep.cameras.items():
            allow_hosts(dep.edges[cam.edge].camera_hosts)  # the camera's own edge's allow-list, as that edge would
            probe = probe_camera(cam, timeout_s)
            if not probe.ok:
                problems.append(f"cameras.{name}: {probe.reason}: {probe.detail}")
    finally:
        allow_hosts(None)
    return problems


def key_problems(dep: Deployment) -> list[str]:
    """With CurveZMQ on, one line per component whose key files do not load or whose sockets would refuse one of
    their clients (:func:`vcascade.core.transport.security.check_keys`, :func:`vcascade.core.transport.zap.check_roles`)."""
    if not dep.security.curve.enabled:
        return []
    problems = []
    for name in component_names(dep):
        try:
            check_keys(dep, name)
            check_roles(dep, name)
        except (SecurityError, KeyError) as exc:
            problems.append(f"security.curve ({name}): {exc}")
    return problems


def port_problems(dep: Deployment) -> list[str]:
    """One line per TCP port of the file that cannot be bound on this host now, with the system's reason and the
    process holding it (:func:`vcascade.app.preflight_ports.taken_ports`, the check ``vcascade run`` makes)."""
    return [taken.line() for taken in taken_ports(dep)]

"""Cross-section checks of the cameras' ``privacy`` settings, and the notices ``vcascade check`` prints about
images that leave an edge unredacted on purpose (docs/PRIVACY.md)."""

from __future__ import annotations

from vcascade.core.schema.checks.edges import _check_class_filter, inline_class_names
from vcascade.core.schema.deployment import Deployment


def check_camera_privacy(dep: Deployment) -> list[str]:
    """A camera's head rule names classes its edge's detector has."""
    problems = []
    for name, cam in dep.cameras.items():
        faces = cam.privacy.faces if cam.privacy is not None else None
        if faces is not None and faces.head_rule is not None and cam.edge in dep.edges:
            names = inline_class_names(dep.edges[cam.edge].detector)
            key = f"cameras.{name}.privacy.faces.head_rule.classes"
            problems += _check_class_filter(key, faces.head_rule.classes, names)
    return problems


def privacy_notices(dep: Deployment) -> list[str]:
    """One line per camera whose ROI crops leave with faces unredacted: a route with ``unredacted_faces: true``
    (the key named), or, for a camera with face redaction, ``roi`` missing from its ``exits``."""
    notices = []
    for name, cam in dep.cameras.items():
        faces = cam.privacy.faces if cam.privacy is not None else None
        if faces is not None and "roi" not in faces.exits:
            notices.append(f"cameras.{name}.privacy.faces.exits: ROI crops of this camera leave with faces unredacted")
        if cam.edge not in dep.edges:
            continue
        key = f"cameras.{name}.routes" if cam.routes else f"edges.{cam.edge}.roi.routes"
        for i, route in enumerate(cam.routes or dep.edges[cam.edge].roi.routes or []):
            if route.unredacted_faces:
                notices.append(
                    f"{key}[{i}].unredacted_faces: crops of camera {name} for recognizer {route.recognizer} leave "
                    f"with faces unredacted"
                )
    return notices

"""The face model files the cameras' ``privacy.faces`` ask for, checked by ``vcascade check`` (the file exists;
light: no ONNX Runtime) and by the pre-flight of ``vcascade run`` and ``check --deep`` (it also loads as
CenterFace, :func:`vcascade.app.preflight_models.model_problems`)."""

from __future__ import annotations

import os

from vcascade.core.config import Deployment
from vcascade.core.runtime.models import find_model, model_search_dirs
from vcascade.core.schema.privacy import FACE_MODEL_TO_FIX


def face_model_problems(dep: Deployment, model_dir: str | os.PathLike[str] | None) -> list[str]:
    """One line per camera whose ``privacy.faces.model`` is in none of the searched folders."""
    problems = []
    for name, cam in dep.cameras.items():
        faces = cam.privacy.faces if cam.privacy is not None else None
        if faces is not None and find_model(faces.model, model_dir) is None:
            searched = ", ".join(str(d) for d in model_search_dirs(model_dir))
            problems.append(
                f"cameras.{name}.privacy.faces.model = {faces.model!r}: no such file (searched {searched}); "
                f"face redaction needs it. {FACE_MODEL_TO_FIX}"
            )
    return problems

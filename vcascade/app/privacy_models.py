"""The model files the cameras' ``privacy.faces`` and ``privacy.text`` ask for, checked by ``vcascade check`` (the
file exists; light: no ONNX Runtime) and by the pre-flight of ``vcascade run`` and ``check --deep`` (it also loads
as CenterFace or as a DB text detector, :func:`vcascade.app.preflight_models.model_problems`)."""

from __future__ import annotations

import os

from vcascade.core.config import Deployment
from vcascade.core.runtime.models import find_model, model_search_dirs
from vcascade.core.schema.privacy import FACE_MODEL_TO_FIX, TEXT_MODEL_TO_FIX

NEEDS = {"faces": ("face redaction", FACE_MODEL_TO_FIX), "text": ("text redaction", TEXT_MODEL_TO_FIX)}
"""Per ``privacy`` key with a model: what needs it, and the hint its message ends with."""


def privacy_model_problems(dep: Deployment, model_dir: str | os.PathLike[str] | None) -> list[str]:
    """One line per camera whose ``privacy.faces.model`` or ``privacy.text.model`` is in none of the searched
    folders."""
    problems = []
    for name, cam in dep.cameras.items():
        for key, (need, hint) in NEEDS.items():
            settings = getattr(cam.privacy, key) if cam.privacy is not None else None
            if settings is not None and find_model(settings.model, model_dir) is None:
                searched = ", ".join(str(d) for d in model_search_dirs(model_dir))
                problems.append(
                    f"cameras.{name}.privacy.{key}.model = {settings.model!r}: no such file (searched {searched}); "
                    f"{need} needs it. {hint}"
                )
    return problems

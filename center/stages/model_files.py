"""Where a recognizer's ONNX model file is. Light (no torch), so ``vcascade run`` checks it before it starts any
process (:mod:`vcascade.app.preflight_models`)."""

from __future__ import annotations

import os
from pathlib import Path

from vcascade.center.stages.ocr_models import VERIFY, ensure_text_model
from vcascade.core.runtime.models import find_model, model_search_dirs
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.startup import StartupError


class RecognizerModelMissing(FileNotFoundError, StartupError):
    """A recognizer's model file is in none of the searched folders. Recovery: put it there or pass
    ``--model-dir DIR``; a worker that raises it is not restarted (the same start would fail the same way)."""


def resolve_onnx_model(model: str, model_dir: str | os.PathLike[str] | None = None) -> Path:
    """The ONNX file of a recognizer's ``model``: package:// URI, absolute path, or a name searched in
    ``model_dir``, ``$VCASCADE_MODEL_DIR`` and the user cache (like the edge's detector). The PP-OCR text model
    (``PP-OCRv6_rec_small.onnx``) is fetched once when missing (:func:`vcascade.center.stages.ocr_models.ensure_text_model`:
    extracted from the pinned rapidocr wheel on PyPI and verified).

    Raises:
        RecognizerModelMissing: (a FileNotFoundError) not found; the message lists the folders searched.
        vcascade.core.runtime.models.ModelUnavailable: the text model is missing and could not be fetched.
    """
    resolved = resolve(model)
    found = find_model(resolved, model_dir)
    if found is None and Path(resolved).name in VERIFY:  # known model: fetched once, like the detector
        found = ensure_text_model(model_dir, name=Path(resolved).name)
    if found is None:
        where = ", ".join(str(d) for d in model_search_dirs(model_dir))
        raise RecognizerModelMissing(f"recognizer model {model!r} not found (searched {where}; pass --model-dir DIR)")
    return found

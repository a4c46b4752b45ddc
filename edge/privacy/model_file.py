"""The redaction's model files (``privacy.faces.model``, ``privacy.text.model``): found on disk, never downloaded
by a running edge.

A camera with face or text redaction must not start on a guess: the edge only looks for the file (search order of
:func:`vcascade.core.runtime.models.find_model`) and a camera whose model is missing or unfit is refused with the
reason ``privacy_model_missing``. The text detector is the ``ocr`` recognizer's (``python -m tools.fetch_models
--text`` fetches it). ``python -m tools.fetch_models --faces`` downloads the official copy
(:data:`vcascade.core.schema.privacy.CENTERFACE_URL`) once, checks its SHA-256 and loads it before putting it in
place (:func:`download_face_model`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from vcascade.core.config import FaceRedactionConfig, TextRedactionConfig
from vcascade.core.runtime.models import ModelUnavailable, download_model, find_model, user_cache_dir, writable_dir
from vcascade.core.schema.privacy import (
    CENTERFACE_MODEL, CENTERFACE_SHA256, CENTERFACE_URL, FACE_MODEL_TO_FIX, TEXT_MODEL_TO_FIX,
)
from vcascade.edge.privacy.centerface import CenterFace, FaceModelError
from vcascade.edge.privacy.text_detector import TextDetector, TextModelError

TO_FIX = FACE_MODEL_TO_FIX


def face_model_path(model: str, model_dir: str | os.PathLike[str] | None) -> Path:
    """The face model file ``model`` (an absolute path, or a name searched like every model's).

    Raises:
        ModelUnavailable: no such file; the message ends with :data:`TO_FIX`.
    """
    found = find_model(model, model_dir)
    if found is None:
        raise ModelUnavailable(f"face model {model} not found. {TO_FIX}")
    return found


class PrivacyModels:
    """The face and text detectors of one edge process, one per model file and input width, shared by its cameras.

    Args:
        model_dir: the folder searched first (``--model-dir``).
    """

    def __init__(self, model_dir: str | os.PathLike[str] | None) -> None:
        self.model_dir = model_dir
        self._lock = threading.Lock()
        self._loaded: dict[tuple[type, Path, int | None], CenterFace | TextDetector] = {}

    def text(self, cfg: TextRedactionConfig) -> TextDetector:
        """The text detector for a camera's ``privacy.text``, loaded on first use.

        Raises:
            ModelUnavailable: the file is missing or is not a DB text detector (the message says which).
        """
        found = find_model(cfg.model, self.model_dir)
        if found is None:
            raise ModelUnavailable(f"text model {cfg.model} not found. {TEXT_MODEL_TO_FIX}")
        return self._load(TextDetector, TextModelError, TEXT_MODEL_TO_FIX, found, cfg.input_width_px)

    def faces(self, cfg: FaceRedactionConfig) -> CenterFace:
        """The detector for a camera's ``privacy.faces``, loaded on first use.

        Raises:
            ModelUnavailable: the file is missing or is not a CenterFace model (the message says which).
        """
        path = face_model_path(cfg.model, self.model_dir)
        return self._load(CenterFace, FaceModelError, TO_FIX, path, cfg.input_width_px)

    def _load(self, kind: type, unfit: type[Exception], to_fix: str, path: Path, input_width_px: int | None) -> Any:
        """The ``kind`` detector of ``path`` at ``input_width_px``, loaded once; ``unfit`` (its error for a file
        that is not its model) raised again as ModelUnavailable ending with ``to_fix``."""
        key = (kind, path, input_width_px)
        with self._lock:
            if key not in self._loaded:
                try:
                    self._loaded[key] = kind(path, input_width_px)
                except unfit as exc:
                    raise ModelUnavailable(f"{exc}. {to_fix}") from exc
            return self._loaded[key]


def download_face_model(
    model_dir: str | os.PathLike[str] | None, url: str = CENTERFACE_URL, sha256: str = CENTERFACE_SHA256
) -> Path:
    """The face model found on disk, else downloaded from ``url`` into ``model_dir`` (when writable) or the user
    cache, its SHA-256 checked against ``sha256`` ('' skips the check) and loaded as CenterFace.

    Raises:
        ModelUnavailable: the download failed, the hash differs, or the file is not a CenterFace model.
    """
    found = find_model(CENTERFACE_MODEL, model_dir)
    if found is not None:
        return found
    folder = Path(model_dir) if model_dir and writable_dir(Path(model_dir)) else user_cache_dir()

    def verify(path: Path) -> None:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if sha256 and digest != sha256:
            raise ValueError(f"SHA-256 {digest} differs from the expected {sha256}")
        CenterFace(path)

    return download_model(url, folder / CENTERFACE_MODEL, verify=verify)

"""The model part of the pre-flight checks (:mod:`vcascade.app.preflight`), which ``vcascade run`` also runs before it
starts any process: every model file is found (or fetched, as the components would) and every detector model is
loaded and checked against its type's contract. Loads ONNX Runtime and OpenCV (the launcher does anyway), never
torch: loading and splitting the recognizers is :func:`vcascade.app.preflight.split_point_problems`'s.
"""

from __future__ import annotations

import os

import onnxruntime as ort

from vcascade.center.stages.model_files import resolve_onnx_model
from vcascade.core.config import (
    Deployment, EdgeConfig, OcrRecognizerConfig, OnnxRecognizerConfig, PrivacyConfig, RecognizerConfig,
)
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.runtime.resources import ResourceNotFound
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.contract import DetectorContractError
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.privacy.model_file import PrivacyModels

ORT_ERRORS_ONLY = 3
"""ONNX Runtime's logger severity for errors and above (0 verbose, 1 info, 2 warning, 3 error, 4 fatal)."""
MODEL_ERRORS = (ModelUnavailable, DetectorContractError, ResourceNotFound, OSError, ValueError, KeyError)
"""What a missing or unfit model raises (OSError covers FileNotFoundError; ValueError a bad split point or class
name); anything else is a bug and is raised."""


def model_problems(dep: Deployment, model_dir: str | os.PathLike[str] | None) -> list[str]:
    """One line per edge whose detector model is missing or unfit, per camera whose face or text model is
    missing or unfit, and per ONNX recognizer whose model file is missing (each message ends with its "To fix" hint
    where the model has one).

    Sets ONNX Runtime's process-wide log level to errors (``ort.set_default_logger_severity(3)``): its warnings
    while loading an unfit model (shape merges, one line per tensor) would bury the one line per problem. Only the
    launcher and ``vcascade check`` call this; the components keep their own level.
    """
    ort.set_default_logger_severity(ORT_ERRORS_ONLY)
    problems = [_detector_problem(name, edge, model_dir) for name, edge in dep.edges.items()]
    problems += [onnx_file_problem(name, rec, model_dir) for name, rec in dep.recognizers.items()]
    models = PrivacyModels(model_dir)
    for name, cam in dep.cameras.items():
        if cam.privacy is not None:
            problems += _privacy_problems(name, cam.privacy, models)
    return [p for p in problems if p]


def _privacy_problems(camera: str, cfg: PrivacyConfig, models: PrivacyModels) -> list[str]:
    """The problem lines of a camera: one if its face model is missing or not CenterFace, one if its text model
    is missing or not a DB text detector (both when both are: one run of ``check --deep`` names every fix)."""
    problems = []
    for key, settings, load in (("faces", cfg.faces, models.faces), ("text", cfg.text, models.text)):
        try:
            if settings is not None:
                load(settings)
        except MODEL_ERRORS as exc:
            problems.append(f"cameras.{camera}.privacy.{key}.model: {exc}")
    return problems


def _detector_problem(name: str, edge: EdgeConfig, model_dir: str | os.PathLike[str] | None) -> str:
    try:
        build_detector(edge.detector, ensure_detector_model(edge.detector, model_dir))
    except MODEL_ERRORS as exc:
        return f"edges.{name}.detector: {exc}"
    return ""


def onnx_file_problem(name: str, rec: RecognizerConfig, model_dir: str | os.PathLike[str] | None) -> str:
    """The problem line of an ONNX recognizer whose model file is missing (fetched once for the text models), or
    "" when it is found or the recognizer has no ONNX file (``type: onnx``: ``model``; ``type: ocr``:
    ``detector_model`` and ``model``)."""
    if not isinstance(rec, (OnnxRecognizerConfig, OcrRecognizerConfig)):
        return ""
    keys = ["detector_model", "model"] if isinstance(rec, OcrRecognizerConfig) else ["model"]
    for key in keys:
        try:
            resolve_onnx_model(getattr(rec, key), model_dir)
        except MODEL_ERRORS as exc:
            return f"recognizers.{name}.{key}: {exc}"
    return ""

"""The edge detector's model file, found the way its config's keys say: a local ``path`` used as is (every user
model's: required by the families of :class:`vcascade.core.schema.detector.UserModelDetectorConfig`, optional for
YOLOX), else a YOLOX model name found on disk, or downloaded once from the detector's ``url`` and verified by
loading it (:mod:`vcascade.core.runtime.models` has the search order and the atomic download).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx

from vcascade.core.config import DetectorConfig, YoloxDetectorConfig
from vcascade.core.runtime.models import (
    MODEL_DIR_ENV,
    ModelUnavailable,
    download_model,
    find_model,
    user_cache_dir,
    writable_dir,
)
from vcascade.core.runtime.onnx_session import make_session
from vcascade.edge.detection.input_size import declared_input_size, sized_model
from vcascade.edge.detection.yolox import check_yolox_signature

log = logging.getLogger(__name__)

INT8_SUFFIX = ".int8.onnx"
"""File name ending of a model's int8 copy (:mod:`vcascade.edge.detection.quantize`)."""


def int8_path(fp32_path: str | os.PathLike[str]) -> Path:
    """Where the int8 copy of a model lives: ``yolox_nano.onnx`` -> ``yolox_nano.int8.onnx`` beside it."""
    path = Path(fp32_path)
    return path.with_name(path.name.removesuffix(".onnx") + INT8_SUFFIX)


def verify_yolox(path: str | os.PathLike[str], input_size: int = 416) -> None:
    """Check that a file is a YOLOX ONNX model for ``input_size`` (loads it with ONNX Runtime, CPU, 1 thread).

    Raises:
        ModelUnavailable: the file is not a loadable ONNX model, or its signature does not fit
            (:func:`vcascade.edge.detection.yolox.check_yolox_signature`).
    """
    try:
        session = make_session(path, intra_op_threads=1)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types for unreadable models
        raise ModelUnavailable(f"{path} is not a loadable ONNX model: {exc}") from exc
    try:
        check_yolox_signature(session, input_size, model_path=str(path))
    except ValueError as exc:
        raise ModelUnavailable(f"{path}: {exc}") from exc


def ensure_detector_model(detector_cfg: DetectorConfig, model_dir: str | os.PathLike[str] | None) -> Path:
    """Path to the detector's model file: its ``path`` when set (a user model, never downloaded; ``model_dir`` is
    not searched), else the YOLOX model :func:`yolox_model_file` finds or downloads (only YOLOX configs have no
    required ``path``); for YOLOX, that file's copy at ``input_size`` when the file declares another size
    (:func:`vcascade.edge.detection.input_size.sized_model`); with ``precision: int8`` (YOLOX), that file's int8 copy beside it (:func:`int8_path`),
    never made here (``vcascade quantize`` makes it).

    Raises:
        ModelUnavailable: ``path`` does not exist, the copy at ``input_size`` cannot be made, or the int8 copy is
            missing; see :func:`yolox_model_file`.
    """
    fp32 = _local_model(detector_cfg.path) if detector_cfg.path is not None else yolox_model_file(detector_cfg, model_dir)
    if isinstance(detector_cfg, YoloxDetectorConfig):
        fp32 = _at_input_size(fp32, detector_cfg.input_size)
    if getattr(detector_cfg, "precision", "fp32") != "int8":
        return fp32
    int8 = int8_path(fp32)
    if not int8.is_file():
        raise ModelUnavailable(
            f"detector precision int8: {int8} does not exist. To fix: make it once from {fp32} with "
            f"`vcascade quantize --model {fp32} --calibration VIDEO` (a clip of the camera), or set precision: fp32"
        )
    log.info("using int8 detector model %s", int8)
    return int8


def _at_input_size(model: Path, input_size: int) -> Path:
    """:func:`~vcascade.edge.detection.input_size.sized_model`, its failures as ModelUnavailable naming the key."""
    try:
        return sized_model(model, input_size)
    except (ValueError, OSError, onnx.shape_inference.InferenceError) as exc:
        raise ModelUnavailable(
            f"detector.input_size {input_size}: no copy of {model} at that size could be made ({exc}). To fix: "
            "use the size the model was exported at, or a model exported at this size"
        ) from exc


def yolox_model_file(detector_cfg: YoloxDetectorConfig, model_dir: str | os.PathLike[str] | None) -> Path:
    """Path to a YOLOX model: ``detector_cfg.path`` when set (a user model, never downloaded), else
    ``detector_cfg.model`` found on disk (:func:`find_model`), else downloaded from ``detector_cfg.url`` into
    ``model_dir`` (when given and writable) or the user cache, and verified (:func:`verify_yolox`).

    Raises:
        ModelUnavailable: not found and the download or verification failed, ``detector_cfg.path`` is missing,
            or ``detector_cfg.model`` is an absolute path to a missing file (absolute paths are never downloaded to).
    """
    if detector_cfg.path is not None:
        return _local_model(detector_cfg.path)
    name = detector_cfg.model
    found = find_model(name, model_dir)
    if found is not None:
        log.info("using detector model %s", found)
        return found
    if Path(name).expanduser().is_absolute():
        raise ModelUnavailable(
            f"detector model {name} does not exist. To fix: download {detector_cfg.url} and save it there, or "
            f"set the detector's `model` to a file name found in --model-dir DIR / {MODEL_DIR_ENV}=DIR."
        )
    folder = Path(model_dir) if model_dir and writable_dir(Path(model_dir)) else user_cache_dir()
    dest = folder / name
    log.info("downloading detector model %s from %s", dest, detector_cfg.url)
    dest = download_model(detector_cfg.url, dest, verify=_verify_download)
    log.info("verified detector model %s", dest)
    return dest


def _verify_download(path: Path) -> None:
    """:func:`verify_yolox` at the size the downloaded file declares (416 for the official YOLOX-nano): a detector
    with another ``input_size`` opens its copy at that size (:func:`_at_input_size`)."""
    verify_yolox(path, input_size=declared_input_size(path) or YoloxDetectorConfig().input_size)


def _local_model(path: str) -> Path:
    """The detector config's ``path`` (a user model: used as is, never downloaded); ModelUnavailable if missing."""
    local = Path(path).expanduser().absolute()
    if not local.is_file():
        raise ModelUnavailable(f"detector model {local} (the detector's `path`) does not exist or is not a file")
    log.info("using detector model %s", local)
    return local

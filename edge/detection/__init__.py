"""Object detectors of the YOLO family, chosen by the detector config's ``type`` from the registry
(:data:`vcascade.edge.detection.registry.DETECTOR_FAMILIES`).

=========  ======================  ============================================  ===================================
type       output                  preprocessing                                 module
=========  ======================  ============================================  ===================================
yolox      ``[B, A, 5+C]`` grid    top-left letterbox, pad 114, BGR 0..255       :mod:`vcascade.edge.detection.yolox`
yolov5     ``[B, N, 5+C]`` px      centred letterbox, pad 114, RGB 0..1          :mod:`vcascade.edge.detection.yolov5`
yolov8     ``[B, 4+C, N]`` px      centred letterbox, pad 114, RGB 0..1          :mod:`vcascade.edge.detection.yolov8`
=========  ======================  ============================================  ===================================

Every detector checks its model's contract at start-up (:mod:`vcascade.edge.detection.contract`) and offers
``detector(frame)`` and ``detector.detect_batch(frames)`` (:class:`~edge.detection.base.Detector`).
"""

from __future__ import annotations

import os
from pathlib import Path

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.config import DetectorConfig
from vcascade.edge.detection.base import Detector, OnnxDetector
from vcascade.edge.detection.contract import DetectorContractError
from vcascade.edge.detection.letterbox import PAD_VALUE, Placement, letterbox_centered, letterbox_top_left, to_bgr
from vcascade.edge.detection.nms import batched_nms, select_detections
from vcascade.edge.detection.registry import DETECTOR_FAMILIES, DetectorFamily
from vcascade.edge.detection.yolov5 import Yolov5Detector
from vcascade.edge.detection.yolov8 import Yolov8Detector
from vcascade.edge.detection.yolox import YoloxDetector


def load_class_names(spec: list[str] | tuple[str, ...] | str | os.PathLike[str] | None) -> tuple[str, ...]:
    """The class names of a detector config: a list as is, a text file read (one name a line, surrounding
    whitespace and blank lines ignored), or the 80 COCO names for None.

    Raises:
        ValueError: the file cannot be read, or it (or the list) names no class or a class twice.
    """
    if spec is None:
        return COCO_CLASSES
    if isinstance(spec, (str, os.PathLike)):
        try:
            names = tuple(line.strip() for line in Path(spec).read_text().splitlines() if line.strip())
        except OSError as exc:
            raise ValueError(f"class names file {os.fspath(spec)}: cannot read: {exc.strerror}") from None
        source = f"class names file {os.fspath(spec)}"
    else:
        names, source = tuple(spec), "class_names"
    if not names:
        raise ValueError(f"{source}: names no class")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{source}: names {twice} more than once")
    return names


def build_detector(
    cfg: DetectorConfig, model_path: str | os.PathLike[str], *, device: str = "cpu"
) -> OnnxDetector:
    """Open the detector a config describes (the :data:`DETECTOR_FAMILIES` entry of its ``type``) on the model file
    ``model_path`` (located by :func:`vcascade.edge.detection.model_file.ensure_detector_model`).
    ``cfg.intra_op_threads`` None means 1 here; the edge fills it in from its cores first
    (:func:`vcascade.core.runtime.threads.detector_threads`).

    Raises:
        KeyError: an unknown ``cfg.type`` (the config schema prevents it).
        ValueError: unreadable class names file, or ``cfg.classes`` names a class the model does not have.
        DetectorContractError: the model does not fit the type, input size or class names.
        FileNotFoundError, RuntimeError: see :class:`~edge.detection.base.OnnxDetector`.
    """
    names = load_class_names(cfg.class_names)
    unknown = sorted(set(cfg.classes or ()) - set(names))
    if unknown:
        raise ValueError(f"detector classes {unknown} are not among the model's class names")
    class_ids = None if cfg.classes is None else {names.index(c) for c in cfg.classes}
    return DETECTOR_FAMILIES[cfg.type].detector(
        model_path, input_size=cfg.input_size, score_threshold=cfg.score_threshold, nms_iou=cfg.nms_iou,
        class_ids=class_ids, class_names=names, max_batch=cfg.max_batch,
        intra_op_threads=cfg.intra_op_threads or 1, allow_spinning=cfg.allow_spinning, device=device,
    )


__all__ = [
    "DETECTOR_FAMILIES", "PAD_VALUE", "Detector", "DetectorContractError", "DetectorFamily", "OnnxDetector",
    "Placement",
    "Yolov5Detector", "Yolov8Detector", "YoloxDetector", "batched_nms", "build_detector", "letterbox_centered",
    "letterbox_top_left", "load_class_names", "select_detections", "to_bgr",
]

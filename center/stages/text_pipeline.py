"""The two-model text recognizer (``type: ocr``): DB text detection on the crop, then CTC recognition of each
region found, as two pipeline stages.

Stage ``detect`` runs the detection model (PaddleOCR PP-OCR det, DB) on the preprocessed crop batch,
(n, 3, H, W) float32, and passes the batch on with its (n, H, W) text probability map. Stage ``read`` finds the
regions on each map (:func:`vcascade.core.text_regions.db_regions`), cuts each out of the same input
(undoing the detector's normalisation), resizes it the PaddleOCR recognition way (height ``rec_input_hw[0]``,
aspect ratio kept, width at most ``rec_input_hw[1]``, right-padded, ``(pixel - 0.5) / 0.5``), runs the
recognition model on every region of the micro-batch at once and keeps the best class and its probability per
time step (greedy CTC's argmax; the decoding itself is the head's, :class:`vcascade.center.heads.text.RegionTextHead`).

The stage engine places the two stages like any other: one device runs both in one stage (``split_points: []``),
two devices run ``detect`` then ``read`` (``split_points: [regions]``); ``auto`` profiles the two
(:func:`profile_ocr`) and balances them over the worker's devices, as for any model.

What ``read`` answers, one float32 array (n, max_regions, 6 + 2 T), row r of ROI i (:data:`PACKED_FIELDS`):
``[valid, detection score, x1, y1, x2, y2, T class ids, T probabilities]``, the box in network-input pixels;
rows past the regions found have ``valid = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np
import onnx

from vcascade.center.stages.model_files import resolve_onnx_model
from vcascade.center.stages.onnx_stages import OnnxStage, load_onnx
from vcascade.center.stages.profile import ModelProfile, Segment, measure_stages
from vcascade.core.text_regions import DbParams, cut_region, db_regions

SPLIT_POINT = "regions"
"""The one split point of an ``ocr`` recognizer: between detection and recognition."""
PACKED_FIELDS = 6
"""Leading fields of each packed region row before its 2 T step values (valid, score, x1, y1, x2, y2)."""
REC_HEIGHT_PX = 48
"""Input height of PaddleOCR's PP-OCR recognition models, px."""


class TextModelMismatch(ValueError):
    """A text model's inputs or outputs are not what the ``ocr`` recognizer needs; the message names the file
    and the expected shape. Recovery: give the right file (start-up error, nothing runs)."""


@dataclass(frozen=True)
class OcrModels:
    """The two models of an ``ocr`` recognizer, checked (:func:`load_ocr_models`)."""

    detector: onnx.ModelProto
    recognizer: onnx.ModelProto


def load_ocr_models(cfg: Any, model_dir: str | None = None) -> OcrModels:
    """Find, load and check the detection (``detector_model``) and recognition (``model``) models.

    Raises:
        RecognizerModelMissing / ModelUnavailable: a file not found (the PP-OCRv6 ones are fetched once).
        TextModelMismatch: a model whose signature does not fit (one line: the file and the expected shape).
    """
    det_path = resolve_onnx_model(cfg.detector_model, model_dir)
    rec_path = resolve_onnx_model(cfg.model, model_dir)
    detector, recognizer = load_onnx(det_path), load_onnx(rec_path)
    check_detector(detector, det_path)
    check_recognizer(recognizer, rec_path)
    return OcrModels(detector, recognizer)


def _shapes(values) -> list[tuple[str, list]]:
    return [(v.name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                      for d in v.type.tensor_type.shape.dim]) for v in values]  # fmt: skip


def check_detector(model: onnx.ModelProto, path: str | Path) -> None:
    """A DB detection model takes one (N, 3, H, W) image and outputs one (N, 1, H, W) probability map first.

    Raises:
        TextModelMismatch: otherwise; the message names ``path``, what it has and the expected shape.
    """
    inits = {i.name for i in model.graph.initializer}
    inputs = _shapes([i for i in model.graph.input if i.name not in inits])
    outputs = _shapes(model.graph.output)
    ok_in = len(inputs) == 1 and len(inputs[0][1]) == 4 and inputs[0][1][1] == 3
    channels = outputs[0][1][1] if outputs and len(outputs[0][1]) == 4 else None
    ok_out = channels == 1 or isinstance(channels, str)  # a named (symbolic) dimension: ONNX Runtime infers it
    if not (ok_in and ok_out):
        raise TextModelMismatch(
            f"text detection model {path}: inputs {inputs}, outputs {outputs}; expected one input (N, 3, H, W) and "
            "a first output (N, 1, H, W), a DB text probability map (PaddleOCR PP-OCR det, e.g. PP-OCRv6_det_small.onnx)"
        )


def check_recognizer(model: onnx.ModelProto, path: str | Path) -> None:
    """A CTC recognition model takes one (N, 3, 48, W) text line and outputs (N, T, C) class probabilities.

    Raises:
        TextModelMismatch: otherwise; the message names ``path``, what it has and the expected shape.
    """
    inits = {i.name for i in model.graph.initializer}
    inputs = _shapes([i for i in model.graph.input if i.name not in inits])
    outputs = _shapes(model.graph.output)
    ok_in = len(inputs) == 1 and len(inputs[0][1]) == 4 and inputs[0][1][1:3] == [3, REC_HEIGHT_PX]
    ok_out = bool(outputs) and len(outputs[0][1]) == 3
    if not (ok_in and ok_out):
        raise TextModelMismatch(
            f"text recognition model {path}: inputs {inputs}, outputs {outputs}; expected one input "
            f"(N, 3, {REC_HEIGHT_PX}, W) and a first output (N, T, C) (PaddleOCR PP-OCR rec, e.g. PP-OCRv6_rec_small.onnx)"
        )


class DetectStage:
    """Stage ``detect``: (x,) -> (x, prob) with x (n, 3, H, W) float32 and prob (n, H, W) float32."""

    def __init__(self, model: onnx.ModelProto, device: str, threads: int, spinning: bool) -> None:
        self.device = device
        self.session = OnnxStage(model, device, threads, spinning)
        self.fixed_batch = None

    def __call__(self, inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        (x,) = inputs
        x = np.ascontiguousarray(np.asarray(x, np.float32))
        (prob, *_) = self.session((x,))
        return x, prob[:, 0]


class ReadStage:
    """Stage ``read``: (x, prob) -> (packed,), see the module docstring.

    Args:
        model: the recognition model. device, threads, spinning: its session's.
        mean, std: the detector input's per-channel normalisation (on 0..1 pixels), to get pixels back.
        params: DB post-processing constants. rec_input_hw: (48, W) recognition input.
    """

    def __init__(self, model: onnx.ModelProto, device: str, threads: int, spinning: bool, *,
                 mean: Sequence[float], std: Sequence[float], params: DbParams,
                 rec_input_hw: tuple[int, int]) -> None:  # fmt: skip
        self.device = device
        self.session = OnnxStage(model, device, threads, spinning)
        self.mean = np.asarray(mean, np.float32)
        self.std = np.asarray(std, np.float32)
        self.params = params
        self.rec_input_hw = tuple(rec_input_hw)

    def __call__(self, inputs: Sequence[Any]) -> tuple[np.ndarray]:
        x, prob = (np.asarray(a, np.float32) for a in inputs)
        n, rows = len(x), self.params.max_regions
        lines, where = [], []
        for i in range(n):
            image = None
            for r, region in enumerate(db_regions(prob[i], self.params, (image_width(x[i]), x.shape[2]))):
                if image is None:  # (H, W, 3) pixels 0..1, the detector's channel order
                    image = np.clip(x[i].transpose(1, 2, 0) * self.std + self.mean, 0.0, 1.0)
                lines.append(rec_input(cut_region(image, region.corners), self.rec_input_hw))
                where.append((i, r, region.score, region.xyxy()))
        steps = self.rec_input_hw[1] // 8 if not lines else None
        ids = probs = np.zeros((0, 0), np.float32)
        if lines:
            (scores, *_) = self.session((np.stack(lines),))
            ids = scores.argmax(axis=2)
            probs = np.take_along_axis(scores, ids[:, :, None], axis=2)[:, :, 0]
            steps = ids.shape[1]
        packed = np.zeros((n, rows, PACKED_FIELDS + 2 * steps), np.float32)
        for k, (i, r, score, box) in enumerate(where):
            packed[i, r, :PACKED_FIELDS] = (1.0, score, *box)
            packed[i, r, PACKED_FIELDS : PACKED_FIELDS + steps] = ids[k]
            packed[i, r, PACKED_FIELDS + steps :] = probs[k]
        return (packed,)


def image_width(x: np.ndarray) -> int:
    """Width of the image in a (3, H, W) network input whose right part may be padding (``keep_ratio_pad`` sets
    the padding to exactly 0 after normalisation): one past the last column holding a non-zero value, px."""
    columns = np.flatnonzero(np.any(x != 0.0, axis=(0, 1)))
    return int(columns[-1]) + 1 if len(columns) else x.shape[2]


def rec_input(line: np.ndarray, input_hw: tuple[int, int]) -> np.ndarray:
    """A text line (h, w, 3) float32 0..1 as recognition input (3, H, W): height H, aspect ratio kept, width
    ``min(W, ceil(H w / h))``, ``(pixel - 0.5) / 0.5``, right-padded with 0 (PaddleOCR ``resize_norm_img``)."""
    height, width = input_hw
    h, w = line.shape[:2]
    resized_w = max(1, min(width, math.ceil(height * w / h)))
    resized = cv2.resize(np.ascontiguousarray(line, np.float32), (resized_w, height), interpolation=cv2.INTER_LINEAR)
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :resized_w] = (resized.transpose(2, 0, 1) - 0.5) / 0.5
    return out


class FusedStage:
    """``detect`` then ``read`` in one stage (a worker with one device)."""

    def __init__(self, detect: DetectStage, read: ReadStage) -> None:
        self.device, self.fixed_batch = detect.device, None
        self._detect, self._read = detect, read

    def __call__(self, inputs: Sequence[Any]) -> tuple[np.ndarray]:
        return self._read(self._detect(inputs))


def build_ocr_stages(models: OcrModels, cfg: Any, split_points: Sequence[str], devices: Sequence[str]) -> list:
    """The stages of an ``ocr`` recognizer on ``devices``: one fused stage (no split point) or ``detect`` and
    ``read`` (split point ``regions``).

    Raises:
        ValueError: other split points, or a device count that does not fit them.
    """
    if list(split_points) not in ([], [SPLIT_POINT]):
        raise ValueError(f"an ocr recognizer splits only at {SPLIT_POINT!r} (split_points: [] or [{SPLIT_POINT}]), "
                         f"got {list(split_points)}")  # fmt: skip
    if len(devices) != len(split_points) + 1:
        raise ValueError(f"{len(devices)} devices for {len(split_points) + 1} stages")
    threads = cfg.intra_op_threads or 1
    params = DbParams(cfg.det_threshold, cfg.box_threshold, cfg.unclip_ratio, cfg.max_regions)
    detect = DetectStage(models.detector, devices[0], threads, cfg.allow_spinning)
    read = ReadStage(models.recognizer, devices[-1], threads, cfg.allow_spinning, mean=cfg.mean, std=cfg.std,
                     params=params, rec_input_hw=tuple(cfg.rec_input_hw))  # fmt: skip
    return [detect, read] if split_points else [FusedStage(detect, read)]


def profile_ocr(models: OcrModels, cfg: Any, sample: np.ndarray, runs: int = 3) -> ModelProfile:
    """The two stages' costs on ``sample`` (n, 3, H, W) float32, ms per micro-batch (median of ``runs`` after one
    warm-up), as a :class:`vcascade.center.stages.profile.ModelProfile` of two segments, ``detect`` and ``read``
    (beginning at :data:`SPLIT_POINT`): what ``split_points: auto`` and ``vcascade plan`` balance."""
    costs = measure_stages(build_ocr_stages(models, cfg, [SPLIT_POINT], ["cpu", "cpu"]), sample, runs)
    return ModelProfile((Segment(None, ("detect",), costs[0]), Segment(SPLIT_POINT, ("read",), costs[1])), len(sample))

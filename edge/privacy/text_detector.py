"""The text detector of the redaction step: PaddleOCR's PP-OCR DB text detection model (``PP-OCRv6_det_small.onnx``,
Apache-2.0) on the whole frame, its probability map turned into regions by the same DB post-processing the
centre's ``ocr`` recognizer uses (:func:`vcascade.core.text_regions.db_regions`).

Preprocessing is PaddleOCR's ``DetResizeForTest`` and ``NormalizeImage``: the BGR frame resized so both sides are
multiples of 32 (to ``input_width_px`` wide when set, aspect ratio kept), scaled to 0..1 and normalised with the
ImageNet mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225) in the frame's channel order, NCHW float32.
"""

from __future__ import annotations

import math
import os

import cv2
import numpy as np
import onnx

from vcascade.core.runtime.onnx_session import checked_cpu_session
from vcascade.core.text_regions import DbParams, db_regions

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
"""PaddleOCR's ``NormalizeImage`` mean for the PP-OCR detector, on 0..1 pixels (ImageNet's)."""
STD = np.array([0.229, 0.224, 0.225], np.float32)
"""PaddleOCR's ``NormalizeImage`` std for the PP-OCR detector (ImageNet's)."""


class TextModelError(ValueError):
    """The file is not a DB text detection model (not loadable, or not one (N, 3, H, W) input and a (N, 1, H, W)
    map out). Recovery: fetch the official file (``python -m tools.fetch_models --text``) or fix
    ``privacy.text.model``."""


class TextDetector:
    """Finds text regions in BGR frames.

    Args:
        path: the ONNX file.
        input_width_px: frames are resized to this width first (None: their own width).
        intra_op_threads: ONNX Runtime threads of one run.

    Raises:
        TextModelError: the file cannot be loaded as a DB text detector.
    """

    def __init__(
        self, path: str | os.PathLike[str], input_width_px: int | None = None, intra_op_threads: int = 1
    ) -> None:
        self.input_width_px = input_width_px
        self.session, self.input_name = checked_cpu_session(
            path, lambda model: _check_signature(model, path), TextModelError, "text detection ONNX model",
            intra_op_threads,
        )

    def detect(
        self, image: np.ndarray, params: DbParams, ignore: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Text regions of one frame.

        Args:
            image: (H, W, 3) uint8 BGR.
            params: DB post-processing constants (threshold, box threshold, unclip ratio, region count).
            ignore: (H, W) bool pixels where no text is looked for (the camera's privacy masks: a block of fill
                colour reads as text to the DB detector, measured on the sample footage); None: none.

        Returns:
            ``(xyxy, score)``: (n, 4) float32 axis-aligned boxes around each (possibly turned) region in
            ``image``'s pixels, (n,) float32 mean text probabilities.
        """
        height, width = image.shape[:2]
        scale = self.input_width_px / width if self.input_width_px else 1.0
        in_w, in_h = _multiple_of_32(width * scale), _multiple_of_32(height * scale)
        resized = cv2.resize(image, (in_w, in_h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        blob = ((resized.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)[None]
        (prob, *_) = self.session.run(None, {self.input_name: np.ascontiguousarray(blob)})
        prob = prob[0, 0]
        if ignore is not None and ignore.any():
            prob = np.where(cv2.resize(ignore.astype(np.uint8), (in_w, in_h), interpolation=cv2.INTER_NEAREST) > 0,
                            0.0, prob)  # fmt: skip
        regions = db_regions(np.ascontiguousarray(prob, np.float32), params)
        if not regions:
            return np.zeros((0, 4), np.float32), np.zeros(0, np.float32)
        xyxy = np.array([r.xyxy() for r in regions], np.float32)
        xyxy *= np.array([width / in_w, height / in_h, width / in_w, height / in_h], np.float32)
        return xyxy, np.array([r.score for r in regions], np.float32)


def _multiple_of_32(size: float) -> int:
    return max(32, int(math.ceil(size / 32) * 32))


def _check_signature(model: onnx.ModelProto, path: str | os.PathLike[str]) -> str:
    """The name of the model's one (N, 3, H, W) input.

    Raises:
        TextModelError: not one 4-d input of 3 channels, or no 4-d first output.
    """
    weights = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    dims = [[d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in inputs]
    outputs = model.graph.output
    out = [d.dim_value or d.dim_param for d in outputs[0].type.tensor_type.shape.dim] if outputs else []
    ok_in = len(inputs) == 1 and len(dims[0]) == 4 and dims[0][1] == 3
    ok_out = len(out) == 4 and (out[1] == 1 or isinstance(out[1], str))  # a symbolic channel: ORT infers it
    if not (ok_in and ok_out):
        raise TextModelError(
            f"{path}: inputs {dims}, first output {out}; expected one input (N, 3, H, W) and a first output "
            "(N, 1, H, W), a DB text probability map (PaddleOCR PP-OCR det, e.g. PP-OCRv6_det_small.onnx)"
        )
    return inputs[0].name

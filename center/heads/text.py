"""Text head (``type: text``): CTC greedy decoding of per-time-step character scores (text recognition).

The recognizer (e.g. PaddleOCR's PP-OCR rec models) outputs (n, T, C) scores: for each ROI, T time steps
along the text line, each a probability distribution over C classes. Class 0 is the CTC blank, classes
1..len(charset) are the characters, and PaddleOCR models trained with ``use_space_char`` add one last class for
the space (C = len(charset) + 2).

Greedy (best-path) decoding (Graves et al. 2006, "Connectionist Temporal Classification", section 3.2): argmax
per step, collapse repeated classes, drop blanks. The text score is the mean, over the kept steps, of their max
probability, and 0.0 when nothing is kept: PaddleOCR's ``CTCLabelDecode`` (ppocr/postprocess/rec_postprocess.py,
``BaseRecLabelDecode.decode``), which rapidocr follows too.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from vcascade.core.protocol.wire import Roi, TextOutput, TextRegion

BLANK = "<blank>"
"""Placeholder for class 0, the CTC blank (never part of decoded text)."""
MODEL_CHARSET_KEY = "character"
"""ONNX metadata property holding a PaddleOCR model's character set, one character per line."""


def read_model_charset(model_path: str) -> list[str]:
    """The character set stored in an ONNX model's metadata property ``character`` (PaddleOCR exports, rapidocr).

    Only the model's protobuf is parsed (``onnx.load(..., load_external_data=False)``); no session is made.

    Args:
        model_path: local ONNX file.

    Returns:
        The characters in class order (class 1 first), e.g. 18,708 for PP-OCRv6_rec_small.

    Raises:
        FileNotFoundError: no such file. ValueError: the model has no (or an empty) ``character`` property.
    """
    import onnx  # here: only text heads with `charset: model` need it

    model = onnx.load(model_path, load_external_data=False)
    props = {prop.key: prop.value for prop in model.metadata_props}
    value = props.get(MODEL_CHARSET_KEY, "")
    if not value:
        raise ValueError(
            f"{model_path} has no `{MODEL_CHARSET_KEY}` metadata property (keys: {sorted(props)}): "
            "give the head's `charset` as a file or a list instead of `model`"
        )
    return [line.removesuffix("\r") for line in value.split("\n")]  # not splitlines: U+2028 etc. are characters


def output_classes(model_path: str) -> int:
    """C, the fixed last dimension of an ONNX CTC model's first output (N, T, C) (protobuf only, no session).

    Raises:
        ValueError: the model's first output has no fixed last dimension.
    """
    import onnx  # here: only text heads of ocr recognizers need it

    dims = onnx.load(model_path, load_external_data=False).graph.output[0].type.tensor_type.shape.dim
    if not dims or not dims[-1].HasField("dim_value"):
        raise ValueError(f"{model_path}: its first output has no fixed class dimension (expected (N, T, C))")
    return int(dims[-1].dim_value)


def ctc_classes(charset: list[str], n_classes: int) -> list[str]:
    """The string of every output class: blank, the characters, and a space when the model has one more class.

    Raises:
        ValueError: ``n_classes`` is neither ``len(charset) + 1`` nor ``len(charset) + 2``.
    """
    if n_classes == len(charset) + 2:
        return [BLANK, *charset, " "]  # PaddleOCR use_space_char: the space is the last class
    if n_classes == len(charset) + 1:
        return [BLANK, *charset]
    raise ValueError(
        f"the model outputs {n_classes} classes but the charset has {len(charset)} characters: expected "
        f"{len(charset) + 1} (blank + characters) or {len(charset) + 2} (blank + characters + space)"
    )


def ctc_greedy_decode(scores: np.ndarray, classes: list[str]) -> list[TextOutput]:
    """Greedy CTC decoding of a batch.

    Args:
        scores: (n, T, C) float probabilities per time step (softmax outputs).
        classes: C strings; class 0 is the blank (see :func:`ctc_classes`).

    Returns:
        One :class:`vcascade.core.protocol.wire.TextOutput` per row: the decoded string and the mean max-probability of
        its kept steps (0.0 when every step is blank).
    """
    best = scores.argmax(axis=2)  # (n, T) class per step
    best_prob = np.take_along_axis(scores, best[:, :, None], axis=2)[:, :, 0]  # (n, T) its probability
    keep = np.ones_like(best, dtype=bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]  # collapse repeats: keep the first step of each run
    keep &= best != 0  # drop blanks
    out = []
    for row in range(len(best)):
        kept = best[row][keep[row]]
        score = float(best_prob[row][keep[row]].mean()) if len(kept) else 0.0
        out.append(TextOutput("".join(classes[c] for c in kept), score))
    return out


class TextHead:
    """CTC text recognition head.

    Args:
        charset: the model's characters in class order (class 1 first), without blank or space.
        min_score: texts scoring below this (0..1) are answered as '' with their score, so a caller can tell a
            rejected reading from no text at all.

    Raises:
        ValueError: empty charset, or ``min_score`` outside 0..1.
    """

    input_ndim = 3
    """Takes (n, T, C) sequences of class probabilities."""

    def __init__(self, charset: list[str], min_score: float = 0.0) -> None:
        if not charset:
            raise ValueError("a text head needs a non-empty charset")
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"min_score must be within 0..1, got {min_score}")
        self.charset = list(charset)
        self.min_score = float(min_score)
        self._classes: list[str] | None = None

    def close(self) -> None:
        """Nothing to release."""

    def __call__(self, outputs: np.ndarray, rois: Sequence[Roi] | None = None) -> list[TextOutput]:
        """One :class:`vcascade.core.protocol.wire.TextOutput` per row of (n, T, C) probabilities ('' with its score when
        the score is under ``min_score``).

        Raises:
            ValueError: not 3-D, or C does not fit the charset (:func:`ctc_classes`).
        """
        scores = np.asarray(outputs, dtype=np.float32)
        if scores.ndim != 3:
            raise ValueError(f"text head expects (n, T, C) scores, got shape {scores.shape}")
        if self._classes is None or len(self._classes) != scores.shape[2]:
            self._classes = ctc_classes(self.charset, scores.shape[2])
        texts = ctc_greedy_decode(scores, self._classes)
        return [t if t.text_score >= self.min_score else TextOutput("", t.text_score) for t in texts]


REGION_FIELDS = 6
"""Leading fields of a packed region row (valid, detection score, x1, y1, x2, y2): the ``ocr`` recognizer's
``read`` stage layout (vcascade/center/stages/text_pipeline.py), followed by T class ids and T probabilities."""


def decode_steps(ids: np.ndarray, probs: np.ndarray, classes: list[str]) -> tuple[str, float]:
    """Greedy CTC decoding of one line from its best class and probability per step (module docstring).

    Args:
        ids: (T,) best class per step (any numeric dtype holding integers). probs: (T,) their probabilities.
        classes: the class strings (:func:`ctc_classes`).

    Returns:
        ``(text, score)``; ``('', 0.0)`` when every step is blank.
    """
    best = ids.astype(np.int64)
    keep = np.ones(len(best), dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    keep &= best != 0
    kept = best[keep]
    if not len(kept):
        return "", 0.0
    return "".join(classes[c] for c in kept), float(probs[keep].mean())


class RegionTextHead:
    """Text head of a two-model recognizer (``type: ocr``): decodes every region the ``read`` stage packed and
    maps its box from network-input pixels to crop pixels.

    Args:
        charset: the recognition model's characters in class order (class 1 first), without blank or space.
        num_classes: C, the recognition model's output classes (:func:`ctc_classes`).
        min_score: regions read with a lower score are answered as '' (with their score).
        input_hw: the detector's input (height, width), px. resize: ``stretch`` or ``keep_ratio_pad``.

    Raises:
        ValueError: empty charset, ``min_score`` outside 0..1, or C that does not fit the charset.
    """

    input_ndim = 3
    """Takes (n, regions, 6 + 2 T) packed regions."""

    def __init__(self, charset: list[str], num_classes: int, min_score: float, input_hw: tuple[int, int],
                 resize: str) -> None:  # fmt: skip
        if not charset:
            raise ValueError("a text head needs a non-empty charset")
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"min_score must be within 0..1, got {min_score}")
        self.classes = ctc_classes(list(charset), num_classes)
        self.min_score = float(min_score)
        self.input_hw = tuple(input_hw)
        self.resize = resize

    def close(self) -> None:
        """Nothing to release."""

    def __call__(self, outputs: np.ndarray, rois: Sequence[Roi] | None = None) -> list[TextOutput]:
        """One :class:`TextOutput` per ROI: ``texts`` every region where something was decoded (reading order; a
        reading under ``min_score`` as ''), ``text`` the best reading
        (highest score among those at or above ``min_score``; '' and 0.0 when none).

        Raises:
            ValueError: not (n, R, 6 + 2 T).
        """
        packed = np.asarray(outputs, dtype=np.float32)
        if packed.ndim != 3 or packed.shape[2] < REGION_FIELDS or (packed.shape[2] - REGION_FIELDS) % 2:
            raise ValueError(f"region text head expects (n, R, 6 + 2 T) packed regions, got shape {packed.shape}")
        steps = (packed.shape[2] - REGION_FIELDS) // 2
        answers = []
        for i, rows in enumerate(packed):
            scale = self._scale(rois[i] if rois is not None else None)
            regions = [self._region(row, steps, scale) for row in rows if row[0] > 0.5]
            regions = [r for r in regions if r.text_score > 0.0]  # nothing decoded there: not a text region
            read = [r for r in regions if r.text]
            best = max(read, key=lambda r: r.text_score) if read else None
            answers.append(TextOutput(best.text if best else "", best.text_score if best else 0.0, tuple(regions)))
        return answers

    def _region(self, row: np.ndarray, steps: int, scale: tuple[float, float]) -> TextRegion:
        text, score = decode_steps(row[REGION_FIELDS : REGION_FIELDS + steps], row[REGION_FIELDS + steps :],
                                   self.classes)  # fmt: skip
        if score < self.min_score:
            text = ""
        sx, sy = scale
        x1, y1, x2, y2 = (float(v) for v in row[2:6])
        return TextRegion(text, score, (x1 * sx, y1 * sy, x2 * sx, y2 * sy), float(row[1]))

    def _scale(self, roi: Roi | None) -> tuple[float, float]:
        """Crop px per network-input px (x, y), from the ROI's crop size; (1, 1) when unknown."""
        if roi is None:
            return 1.0, 1.0
        x1, y1, x2, y2 = roi.crop_xyxy
        w, h = max(1, x2 - x1), max(1, y2 - y1)
        height, width = self.input_hw
        if self.resize == "keep_ratio_pad":  # preprocess.keep_ratio_width_px
            return w / max(1, min(width, math.ceil(height * w / h))), h / height
        return w / width, h / height

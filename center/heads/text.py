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

from typing import Sequence

import numpy as np

from vcascade.core.protocol.wire import Roi, TextOutput

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

"""Classifier head (``type: classifier``): per-ROI class scores to the top-k labels, best first."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vcascade.core.protocol.wire import ClassifierOutput, Roi


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, C) logits to float32 probabilities; the row maximum is subtracted first so that
    ``exp`` cannot overflow (the result is unchanged: softmax is invariant to adding a constant to a row)."""
    shifted = np.asarray(logits, dtype=np.float32) - np.max(logits, axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


class ClassifierHead:
    """Top-k labels of (n, C) class scores.

    Args:
        labels: the model's class names in output order; their number must equal C.
        top_k: labels kept per ROI (at most C), >= 1.
        softmax: apply a softmax first (the model outputs logits); False: report the outputs as they are
            (the model outputs probabilities already).

    Raises:
        ValueError: ``top_k < 1`` or no labels.
    """

    input_ndim = 2
    """Takes (n, C) scores; higher-rank outputs such as (n, C, 1, 1) are flattened per row."""

    def __init__(self, labels: list[str], top_k: int = 1, softmax: bool = False) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not labels:
            raise ValueError("a classifier head needs at least one label")
        self.labels = list(labels)
        self.top_k = int(top_k)
        self.softmax = bool(softmax)

    def close(self) -> None:
        """Nothing to release."""

    def __call__(self, outputs: np.ndarray, rois: Sequence[Roi] | None = None) -> list[ClassifierOutput]:
        """One :class:`vcascade.core.protocol.wire.ClassifierOutput` per row: the top-k labels and their scores, best
        first.

        Args:
            outputs: (n, C) float array of logits (``softmax=True``) or probabilities.

        Raises:
            ValueError: not 2-D, or C differs from the number of labels (the message gives both counts).
        """
        scores = self._check(outputs)
        if self.softmax:
            scores = softmax(scores)
        k = min(self.top_k, scores.shape[1])
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (n, k) class indices, best first
        return [
            ClassifierOutput(tuple(self.labels[c] for c in row), tuple(float(s) for s in scores[i, row]))
            for i, row in enumerate(top)
        ]

    def _check(self, outputs: np.ndarray) -> np.ndarray:
        scores = np.asarray(outputs, dtype=np.float32)
        if scores.ndim != 2:
            raise ValueError(f"classifier head expects (n, C) scores, got shape {scores.shape}")
        if scores.shape[1] != len(self.labels):
            raise ValueError(
                f"classifier head has {len(self.labels)} labels but the model outputs {scores.shape[1]} classes: "
                "`labels` must list one name per model output class, in output order"
            )
        return scores

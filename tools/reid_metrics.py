"""Re-identification quality of an identity assignment against ground truth (used by tools/bench_reid.py).

Every function takes, for the N labelled ROIs in arrival order, ``truth`` (N,) int64 ground-truth identities,
``predicted`` (N,) int64 identity ids given by the system, and where needed ``camera`` (N,) str.

* pairwise precision / recall of "same identity" over all ROI pairs, and over pairs from different cameras
  (re-identification proper): precision = pairs both call the same / pairs the system calls the same;
* IDF1 (Ristani et al., "Performance Measures and a Data Set for Multi-Target, Multi-Camera Tracking", ECCV
  2016 workshops): ground-truth and predicted identities matched one-to-one to maximise the ROIs they share
  (IDTP); IDF1 = 2 IDTP / (ROIs in truth + ROIs predicted) = IDTP / N;
* identity switches: along each true identity's ROIs in arrival order, how often the predicted id changes
  (as CLEAR MOT's IDSW, Bernardin & Stiefelhagen 2008, counted per ROI rather than per frame);
* fragmentations: for each true identity, the number of distinct predicted ids minus one (the pieces it is
  split into beyond the first), summed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment


def _pairs(counts: np.ndarray) -> int:
    """Unordered pairs within groups of the given sizes: sum of n (n - 1) / 2."""
    counts = np.asarray(counts, dtype=np.int64)
    return int((counts * (counts - 1) // 2).sum())


def contingency(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """(true identities, predicted ids) int64 matrix of ROI counts."""
    _, t = np.unique(truth, return_inverse=True)
    _, p = np.unique(predicted, return_inverse=True)
    table = np.zeros((t.max(initial=-1) + 1, p.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (t, p), 1)
    return table


def pair_counts(truth: np.ndarray, predicted: np.ndarray) -> tuple[int, int, int]:
    """``(both same, predicted same, truly same)`` over all unordered ROI pairs."""
    table = contingency(truth, predicted)
    return _pairs(table.ravel()), _pairs(table.sum(axis=0)), _pairs(table.sum(axis=1))


def pairwise(truth: np.ndarray, predicted: np.ndarray, camera: np.ndarray) -> dict[str, float]:
    """Pairwise precision and recall of "same identity": over all pairs and over cross-camera pairs.

    Cross-camera counts are the all-pairs counts minus those within each camera. A ratio with no pair to
    count is NaN.

    Returns:
        ``{"precision", "recall", "cross_precision", "cross_recall", "cross_true_pairs"}``.
    """
    both, pred_same, true_same = pair_counts(truth, predicted)
    cross = np.array([both, pred_same, true_same])
    for cam in np.unique(camera):
        mask = camera == cam
        cross -= np.array(pair_counts(truth[mask], predicted[mask]))
    return {
        "precision": _ratio(both, pred_same), "recall": _ratio(both, true_same),
        "cross_precision": _ratio(cross[0], cross[1]), "cross_recall": _ratio(cross[0], cross[2]),
        "cross_true_pairs": int(cross[2]),
    }


def idf1(truth: np.ndarray, predicted: np.ndarray) -> float:
    """IDF1 of a one-to-one matching of true and predicted identities (Hungarian, maximum shared ROIs)."""
    if len(truth) == 0:
        return float("nan")
    table = contingency(truth, predicted)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / len(truth))


def switches_and_fragments(truth: np.ndarray, predicted: np.ndarray) -> tuple[int, int]:
    """``(identity switches, fragmentations)`` (module docstring), ROIs taken in the given (arrival) order."""
    switches = fragments = 0
    for identity in np.unique(truth):
        seq = predicted[truth == identity]
        switches += int(np.count_nonzero(seq[1:] != seq[:-1]))
        fragments += len(np.unique(seq)) - 1
    return switches, fragments


def quality(truth: np.ndarray, predicted: np.ndarray, camera: np.ndarray) -> dict[str, Any]:
    """All the measures above for one assignment, plus ``identities`` (distinct predicted ids)."""
    switches, fragments = switches_and_fragments(truth, predicted)
    return {**pairwise(truth, predicted, camera), "idf1": idf1(truth, predicted), "id_switches": switches,
            "fragmentations": fragments, "identities": len(np.unique(predicted))}


def _ratio(num: int, den: int) -> float:
    return float(num / den) if den else float("nan")

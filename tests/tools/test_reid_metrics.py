"""tools/reid_metrics.py on assignments small enough to count by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tools.reid_metrics import idf1, pairwise, quality, switches_and_fragments

TRUTH = np.array([0, 0, 0, 1, 1, 2])
CAMERA = np.array(["a", "b", "a", "a", "b", "b"])


def test_a_perfect_assignment_scores_one_whatever_the_id_numbers():
    q = quality(TRUTH, np.array([7, 7, 7, 3, 3, 9]), CAMERA)
    assert q["precision"] == q["recall"] == q["cross_precision"] == q["cross_recall"] == q["idf1"] == 1.0
    assert q["id_switches"] == q["fragmentations"] == 0 and q["identities"] == 3


def test_one_id_for_everything_has_full_recall_and_low_precision():
    p = pairwise(TRUTH, np.zeros(6, dtype=np.int64), CAMERA)
    # true pairs: 3 within identity 0 + 1 within identity 1 = 4 of 15 pairs
    assert p["recall"] == 1.0 and p["precision"] == pytest.approx(4 / 15)
    # cross-camera pairs: 3 a x 3 b = 9; true ones: (0a,0b) x2 + (1a,1b) = 3
    assert p["cross_precision"] == pytest.approx(3 / 9) and p["cross_true_pairs"] == 3


def test_an_identity_split_across_cameras_loses_cross_recall_only():
    predicted = np.array([0, 5, 0, 1, 1, 2])  # identity 0 on camera b got a new id
    p = pairwise(TRUTH, predicted, CAMERA)
    assert p["precision"] == 1.0 and p["cross_precision"] == 1.0
    assert p["recall"] == pytest.approx(2 / 4)  # kept: (0a,0a) and (1a,1b)
    assert p["cross_recall"] == pytest.approx(1 / 3)
    assert switches_and_fragments(TRUTH, predicted) == (2, 1)  # 0 -> 5 -> 0: two switches, one extra piece
    assert idf1(TRUTH, predicted) == pytest.approx(5 / 6)


def test_idf1_matches_one_to_one():
    # two true identities merged under one id: only one of them can own it
    assert idf1(np.array([0, 0, 1, 1]), np.array([4, 4, 4, 4])) == pytest.approx(0.5)

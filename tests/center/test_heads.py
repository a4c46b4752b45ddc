"""EmbeddingHead on synthetic vectors: normalisation, enrol, match, running mean, eviction."""

from __future__ import annotations

import numpy as np
import pytest

from center.heads import EmbeddingHead, l2_normalise


def _basis(dim: int, *indices: int) -> np.ndarray:
    return np.eye(dim, dtype=np.float32)[list(indices)]


def test_l2_normalise_rows_to_unit_norm_and_keeps_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [-2.0, 0.0]])
    out = l2_normalise(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0, 0], [-1, 0]], rtol=1e-6)


def test_first_sight_enrols_with_similarity_one():
    head = EmbeddingHead(match_threshold=0.8, max_identities=10)
    (match,) = head(_basis(4, 0) * 7.0)
    assert match == (0, 1.0, True)
    assert len(head) == 1


def test_scaled_copy_matches_same_identity():
    head = EmbeddingHead(0.8, 10)
    head(_basis(4, 0))
    (match,) = head(_basis(4, 0) * 123.0)  # scale must not matter: cosine
    assert match.identity_id == 0 and not match.enrolled
    assert match.similarity == pytest.approx(1.0)


def test_below_threshold_enrols_new_identity():
    head = EmbeddingHead(0.8, 10)
    head(_basis(4, 0))
    v = np.array([[0.7, 0.714, 0, 0]], np.float32)  # cosine to e0 ~ 0.70 < 0.8
    (match,) = head(v)
    assert match.identity_id == 1 and match.enrolled


def test_two_crops_of_a_new_object_in_one_batch_share_an_id():
    head = EmbeddingHead(0.8, 10)
    matches = head(np.concatenate([_basis(4, 2), _basis(4, 2) * 0.5, _basis(4, 3)]))
    assert [m.identity_id for m in matches] == [0, 0, 1]
    assert [m.enrolled for m in matches] == [True, False, True]


def test_gallery_vector_is_normalised_running_mean():
    head = EmbeddingHead(0.5, 10)
    a = np.array([[1.0, 0.0]], np.float32)
    b = l2_normalise(np.array([[1.0, 1.0]]))  # cosine to a = 0.707 -> matches, mean moves halfway
    head(a)
    head(b)
    mean_dir = l2_normalise(a + b)
    (match,) = head(mean_dir)
    assert match.identity_id == 0
    assert match.similarity == pytest.approx(1.0, abs=1e-6)


def test_eviction_drops_least_recently_matched_identity():
    head = EmbeddingHead(0.9, max_identities=2)
    head(_basis(3, 0))  # id 0
    head(_basis(3, 1))  # id 1
    head(_basis(3, 0))  # id 0 matched again: id 1 is now the least recently matched
    (new,) = head(_basis(3, 2))  # gallery full: evicts id 1
    assert new == (2, 1.0, True)
    assert sorted(head.identities()) == [0, 2]
    (again,) = head(_basis(3, 1))  # id 1 is gone: comes back as a new identity, evicting id 0
    assert again.identity_id == 3 and again.enrolled
    assert sorted(head.identities()) == [2, 3]


def test_wrong_shapes_raise():
    head = EmbeddingHead(0.8, 4)
    with pytest.raises(ValueError):
        head(np.zeros(4, np.float32))
    head(np.ones((1, 4), np.float32))
    with pytest.raises(ValueError):
        head(np.ones((1, 5), np.float32))
    with pytest.raises(ValueError):
        EmbeddingHead(0.8, 0)

"""ExactIndex and AnnIndex: same answers to the same calls; the ANN index's recall against exact search."""

from __future__ import annotations

import numpy as np
import pytest

from vcascade.center.identity.index import NO_ID, AnnIndex, ExactIndex, make_index

KINDS = ["exact", "ann"]


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered(rng: np.random.Generator, n: int, dim: int, clusters: int, spread: float) -> np.ndarray:
    """Unit rows around ``clusters`` random centres (nearest neighbours are close, as in a real gallery)."""
    centres = unit_rows(rng, clusters, dim)
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", KINDS)
def test_make_index_builds_the_named_class(kind):
    index = make_index(kind, 8)
    assert isinstance(index, {"exact": ExactIndex, "ann": AnnIndex}[kind])
    assert len(index) == 0


def test_make_index_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown index kind 'flat'.*'ann', 'exact'"):
        make_index("flat", 8)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_index_answers_no_id(kind):
    ids, sims = make_index(kind, 8).search(unit_rows(np.random.default_rng(0), 3, 8), 2)
    assert ids.shape == (3, 2) and ids.dtype == np.int64 and (ids == NO_ID).all()
    assert sims.shape == (3, 2) and sims.dtype == np.float32 and np.isneginf(sims).all()


@pytest.mark.parametrize("kind", KINDS)
def test_search_returns_the_callers_ids_and_cosine_similarities(kind):
    rng = np.random.default_rng(1)
    vectors = unit_rows(rng, 5, 16)
    index = make_index(kind, 16)
    index.add(np.array([10, 3, 99, 7, 12345678901], dtype=np.int64), vectors)
    assert len(index) == 5
    ids, sims = index.search(vectors[[2, 4]], 1)
    assert ids[:, 0].tolist() == [99, 12345678901]
    np.testing.assert_allclose(sims[:, 0], 1.0, atol=1e-5)
    ids, sims = index.search(vectors[:1], 7)  # more neighbours asked than held: padded, most similar first
    keys = np.array([10, 3, 99, 7, 12345678901])
    order = np.argsort(-(vectors @ vectors[0]))
    assert ids[0, :5].tolist() == keys[order].tolist()
    np.testing.assert_allclose(sims[0, :5], (vectors @ vectors[0])[order], atol=1e-5)
    assert (ids[0, 5:] == NO_ID).all() and np.isneginf(sims[0, 5:]).all()


@pytest.mark.parametrize("kind", KINDS)
def test_remove_forgets_ids_and_ignores_unknown_ones(kind):
    rng = np.random.default_rng(2)
    vectors = unit_rows(rng, 4, 16)
    index = make_index(kind, 16)
    index.add(np.arange(4), vectors)
    index.remove(np.array([1, 42]))
    assert len(index) == 3
    ids, _ = index.search(vectors, 4)
    assert 1 not in ids and (ids[:, 3] == NO_ID).all()
    assert ids[[0, 2, 3], 0].tolist() == [0, 2, 3]
    index.add(np.array([1]), vectors[1:2])  # an id can come back after removal
    assert len(index) == 4
    assert index.search(vectors[1:2], 1)[0][0, 0] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_add_of_a_present_id_replaces_its_vector(kind):
    rng = np.random.default_rng(3)
    old, new = unit_rows(rng, 2, 16)
    index = make_index(kind, 16)
    index.add(np.array([5, 6]), np.stack([old, unit_rows(rng, 1, 16)[0]]))
    index.add(np.array([5]), new[None])
    assert len(index) == 2
    ids, sims = index.search(new[None], 1)
    assert ids[0, 0] == 5 and sims[0, 0] == pytest.approx(1.0, abs=1e-5)


def test_exact_index_keeps_ids_right_through_growth_and_swap_removal():
    rng = np.random.default_rng(4)
    vectors = unit_rows(rng, 100, 8)  # past the initial capacity of 16: the arrays grow
    index = ExactIndex(8)
    index.add(np.arange(100) * 3, vectors)
    index.remove(np.arange(0, 100, 2) * 3)
    ids, _ = index.search(vectors[1::2], 1)
    assert ids[:, 0].tolist() == (np.arange(1, 100, 2) * 3).tolist()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad, message", [
    ((np.array([[1, 2]]), None), "ids must be a 1-D array"),
    ((np.array([1.0, 2.0]), None), "ids must be integers"),
    ((np.array([-1, 2]), None), "ids must be >= 0"),
    ((np.array([4, 4]), None), "ids repeat"),
    ((np.array([1, 2]), "wide"), r"vectors must have shape \(n, 8\)"),
    ((np.array([1, 2]), "nan"), "NaN or inf"),
    ((np.array([1, 2]), "scaled"), "row 1 has norm 2"),
    ((np.array([1, 2, 3]), None), "3 ids for 2 vectors"),
])
def test_add_refuses_bad_input_naming_the_cause(kind, bad, message):
    ids, vectors_kind = bad
    vectors = unit_rows(np.random.default_rng(5), 2, 8)
    if vectors_kind == "wide":
        vectors = unit_rows(np.random.default_rng(5), 2, 9)
    elif vectors_kind == "nan":
        vectors[0, 0] = np.nan
    elif vectors_kind == "scaled":
        vectors[1] *= 2
    index = make_index(kind, 8)
    with pytest.raises(ValueError, match=message):
        index.add(ids, vectors)
    assert len(index) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_search_refuses_wrong_shapes_and_k(kind):
    index = make_index(kind, 8)
    index.add(np.arange(2), unit_rows(np.random.default_rng(6), 2, 8))
    with pytest.raises(ValueError, match=r"queries must have shape \(n, 8\), got \(8,\)"):
        index.search(np.ones(8, np.float32), 1)
    with pytest.raises(ValueError, match=r"queries must have shape \(n, 8\), got \(1, 4\)"):
        index.search(np.ones((1, 4), np.float32), 1)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(np.ones((1, 8), np.float32), 0)


@pytest.mark.parametrize("train_size", [1024, 64])  # exact scans before the graph is built; the graph
def test_ann_index_skips_tombstones_and_rebuilds_when_they_outnumber_live_vectors(train_size):
    rng = np.random.default_rng(8)
    vectors = unit_rows(rng, 300, 16)
    index = AnnIndex(16, min_rebuild_tombstones=50, train_size=train_size)
    index.add(np.arange(300), vectors)
    index.remove(np.arange(0, 140))  # 140 tombstones, 160 live: no rebuild yet
    assert len(index) == 160 and index.tombstones == 140
    ids, _ = index.search(vectors, 5)
    assert ids.min() >= 140  # removed ids never come back
    index.add(np.arange(140, 170), vectors[:30])  # 30 replaced: 170 tombstones > 160 live -> rebuilt
    assert len(index) == 160 and index.tombstones == 0
    ids, sims = index.search(vectors[:30], 1)
    assert ids[:, 0].tolist() == list(range(140, 170))
    np.testing.assert_allclose(sims[:, 0], 1.0, atol=1e-5)
    ids, _ = index.search(vectors[170:], 1)
    assert ids[:, 0].tolist() == list(range(170, 300))


def test_ann_recall_at_1_against_exact_on_clustered_vectors():
    """Clustered unit vectors (a gallery's identities lie near each other) and noisy re-observations as queries."""
    rng = np.random.default_rng(7)
    dim, n = 64, 5000
    gallery = clustered(rng, n, dim, clusters=50, spread=0.15)
    probes = gallery[rng.integers(0, n, 500)] + 0.05 * rng.standard_normal((500, dim)).astype(np.float32)
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    exact, ann = ExactIndex(dim), AnnIndex(dim)
    for index in (exact, ann):
        index.add(np.arange(n) + 1000, gallery)
    exact_ids, exact_sims = exact.search(probes, 1)
    ann_ids, ann_sims = ann.search(probes, 1)
    assert np.mean(ann_ids[:, 0] == exact_ids[:, 0]) >= 0.99
    same = ann_ids[:, 0] == exact_ids[:, 0]
    np.testing.assert_allclose(ann_sims[same, 0], exact_sims[same, 0], atol=1e-5)


def low_rank(rng: np.random.Generator, n: int, dim: int, rank: int) -> np.ndarray:
    """Non-negative unit rows spanning about ``rank`` of ``dim`` directions around a common mean, as ReLU
    embeddings do (a crowded gallery: high cosine between different rows)."""
    basis = np.linalg.qr(rng.standard_normal((dim, rank)))[0].T.astype(np.float32)  # (rank, dim) orthonormal
    mean = np.abs(rng.standard_normal(dim)).astype(np.float32)
    x = np.maximum(mean + 0.5 * rng.standard_normal((n, rank)).astype(np.float32) @ basis, 0.0)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ann_exact_scans_until_train_size_then_searches_a_projected_graph_with_exact_reranking():
    rng = np.random.default_rng(9)
    dim, n = 256, 3000
    gallery = low_rank(rng, n, dim, rank=24)
    probes = gallery[rng.integers(0, n, 400)] + 0.02 * rng.standard_normal((400, dim)).astype(np.float32)
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    exact, ann = ExactIndex(dim), AnnIndex(dim, reduced_dim=32, train_size=1000)
    exact.add(np.arange(n), gallery)
    ann.add(np.arange(999), gallery[:999])  # one short of train_size: exact scans, same answers as ExactIndex
    assert not ann.trained
    small = ExactIndex(dim)
    small.add(np.arange(999), gallery[:999])
    np.testing.assert_array_equal(ann.search(probes, 3)[0], small.search(probes, 3)[0])
    ann.add(np.arange(999, n), gallery[999:])  # train_size reached: projection learnt, graph built
    assert ann.trained and len(ann) == n
    exact_ids, exact_sims = exact.search(probes, 5)
    ann_ids, ann_sims = ann.search(probes, 5)
    assert np.mean(ann_ids[:, 0] == exact_ids[:, 0]) >= 0.99
    same = ann_ids == exact_ids
    # re-ranked with the full vectors: similarities are exact cosines, not projected ones
    np.testing.assert_allclose(ann_sims[same], exact_sims[same], atol=1e-5)
    assert np.mean(same) >= 0.95


def test_ann_rebuild_below_train_size_returns_to_exact_scans():
    rng = np.random.default_rng(10)
    vectors = low_rank(rng, 400, 64, rank=8)
    index = AnnIndex(64, reduced_dim=16, train_size=200, min_rebuild_tombstones=10)
    index.add(np.arange(400), vectors)
    assert index.trained
    index.remove(np.arange(250))  # 250 tombstones > 150 live: rebuilt from 150 < train_size
    assert not index.trained and index.tombstones == 0 and len(index) == 150
    ids, sims = index.search(vectors[250:], 1)
    assert ids[:, 0].tolist() == list(range(250, 400))
    np.testing.assert_allclose(sims[:, 0], 1.0, atol=1e-5)


def test_ann_refuses_bad_settings():
    with pytest.raises(ValueError, match="rerank_factor must be >= 1, got 0"):
        AnnIndex(8, rerank_factor=0)

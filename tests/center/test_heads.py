"""EmbeddingHead on synthetic vectors: normalisation, enrol, match, running mean, eviction; the head registry
and the Result fields each head fills."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from center.heads import HEADS, ClassifierHead, EmbeddingHead, Labels, Text, TextHead, build_head, l2_normalise
from vcascade import wire
from vcascade.config import (
    ClassifierHeadConfig,
    ConfigError,
    Deployment,
    EmbeddingHeadConfig,
    TextHeadConfig,
    load_config,
)


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


# ---------------------------------------------------------------- registry


def test_registry_builds_each_head_type_from_its_config():
    embedding = build_head(EmbeddingHeadConfig(match_threshold=0.5, max_identities=3))
    assert isinstance(embedding, EmbeddingHead) and embedding.match_threshold == 0.5 and embedding.max_identities == 3
    assert isinstance(build_head(ClassifierHeadConfig(type="classifier", labels=["a"])), ClassifierHead)
    assert isinstance(build_head(TextHeadConfig(type="text", charset=["a"])), TextHead)
    assert set(HEADS) == {"embedding", "classifier", "text"}
    assert [EmbeddingHead.input_ndim, ClassifierHead.input_ndim, TextHead.input_ndim] == [2, 2, 3]


def test_unknown_head_type_names_the_known_ones():
    with pytest.raises(KeyError, match="known: \\['classifier', 'embedding', 'text'\\]"):
        build_head(SimpleNamespace(type="segmenter"))


def test_each_head_output_fills_its_own_result_fields():
    (match,) = EmbeddingHead(0.8, 4)(_basis(3, 1))
    fields = match.result_fields()
    assert fields == {"identity_id": 0, "similarity": 1.0, "enrolled": True}
    result = wire.decode(wire.encode(wire.Result(roi_id="r", worker="w", **fields)))
    assert (result.identity_id, result.labels, result.text) == (0, [], "")
    labelled = wire.Result(roi_id="r", worker="w", **Labels(("car", "bus"), (0.75, 0.25)).result_fields())
    assert wire.decode(wire.encode(labelled)).label_scores == [0.75, 0.25]
    texted = wire.decode(wire.encode(wire.Result(roi_id="r", worker="w", **Text("AB 12", 0.97).result_fields())))
    assert (texted.text, texted.text_score, texted.identity_id) == ("AB 12", 0.97, -1)


def test_head_config_is_chosen_by_type_and_embedding_stays_the_default(demo_raw):
    raw = copy.deepcopy(demo_raw)
    recognizer = raw["recognizers"]["mobilenetv2-embedder"]
    del recognizer["head"]
    assert isinstance(Deployment.model_validate(raw).recognizers["mobilenetv2-embedder"].head, EmbeddingHeadConfig)
    recognizer["head"] = {"match_threshold": 0.5}  # no `type`: an embedding head, as before other types existed
    assert Deployment.model_validate(raw).recognizers["mobilenetv2-embedder"].head == EmbeddingHeadConfig(
        match_threshold=0.5
    )
    recognizer["head"] = {"type": "text", "min_score": 0.3}
    head = Deployment.model_validate(raw).recognizers["mobilenetv2-embedder"].head
    assert isinstance(head, TextHeadConfig) and head.charset == "model"
    recognizer["head"] = {"type": "classifier", "labels": ["a"], "match_threshold": 0.5}
    with pytest.raises(ValidationError, match="match_threshold"):  # extra keys of another head type: refused
        Deployment.model_validate(raw)


def test_charset_model_on_a_recognizer_without_onnx_model_is_a_config_error(demo_raw, tmp_path):
    raw = copy.deepcopy(demo_raw)
    raw["recognizers"]["mobilenetv2-embedder"]["head"] = {"type": "text", "charset": "model"}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"recognizers.mobilenetv2-embedder.head.charset = 'model': a torch"):
        load_config(path)
    raw["recognizers"]["mobilenetv2-embedder"]["head"]["charset"] = ["a", "b"]
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path).recognizers["mobilenetv2-embedder"].head.charset == ["a", "b"]

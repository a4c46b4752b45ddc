"""EmbeddingHead on synthetic vectors: normalisation, enrol, match, running mean, eviction; the head registry
and the Result fields each head fills."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from vcascade.center.heads import (
    HEADS,
    ClassifierHead,
    EmbeddingHead,
    TextHead,
    build_head,
    head_registry,
    l2_normalise,
)
from vcascade.center.identity import IdentityHead
from vcascade.core.protocol import wire
from vcascade.core.config import (
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
    assert match == wire.EmbeddingOutput(0, 1.0, True)
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
    assert new == wire.EmbeddingOutput(2, 1.0, True)
    assert sorted(head.identities()) == [0, 2]
    (again,) = head(_basis(3, 1))  # id 1 is gone: comes back as a new identity, evicting id 0
    assert again.identity_id == 3 and again.enrolled
    assert sorted(head.identities()) == [2, 3]


def _reference_matches(batches: list[np.ndarray], threshold: float, capacity: int) -> list[tuple[int, bool]]:
    """The head's rules, one row at a time against every identity: match the most similar at or above
    ``threshold`` (running mean), else enrol, evicting the least recently matched when full."""
    gallery: dict[int, list] = {}  # id -> [sum of unit rows, tick of last match or enrolment]
    out, tick, next_id = [], 0, 0
    for unit in (row for batch in batches for row in l2_normalise(batch)):
        tick += 1
        sims = {i: float(l2_normalise(s[None])[0] @ unit) for i, (s, _) in gallery.items()}
        best = max(sims, key=sims.get, default=None)
        if best is not None and sims[best] >= threshold:
            gallery[best][0] = gallery[best][0] + unit
            gallery[best][1] = tick
            out.append((best, False))
            continue
        if len(gallery) == capacity:
            del gallery[min(gallery, key=lambda i: gallery[i][1])]
        gallery[next_id] = [unit.copy(), tick]
        out.append((next_id, True))
        next_id += 1
    return out


@pytest.mark.parametrize("capacity", [5, 1000])
def test_matches_equal_a_row_by_row_reference_when_full_and_when_mostly_empty(capacity):
    """The head multiplies only the slots in use; enrolments within a batch and evictions keep the answers of
    a plain row-by-row search over every identity."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((12, 16)).astype(np.float32)
    batches = [centres[rng.integers(0, 12, rng.integers(1, 9))] + 0.2 * rng.standard_normal((1, 16)).astype(np.float32)
               for _ in range(40)]  # fmt: skip
    head = EmbeddingHead(0.9, capacity)
    got = [(m.identity_id, m.enrolled) for batch in batches for m in head(batch)]
    assert got == _reference_matches(batches, 0.9, capacity)
    assert len(head) == min(capacity, 1 + max(i for i, _ in got))


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
    assert isinstance(embedding, IdentityHead) and embedding.space.match_threshold == 0.5
    assert embedding.space.capacity == 3 and embedding.sync.capacity == 3
    embedding.close()
    assert isinstance(build_head(ClassifierHeadConfig(type="classifier", labels=["a"])), ClassifierHead)
    assert isinstance(build_head(TextHeadConfig(type="text", charset=["a"])), TextHead)
    assert set(HEADS) == {"embedding", "classifier", "text"}
    assert [IdentityHead.input_ndim, ClassifierHead.input_ndim, TextHead.input_ndim] == [2, 2, 3]
    assert EmbeddingHead.input_ndim == 2


def test_unknown_head_type_names_the_known_ones():
    with pytest.raises(KeyError, match="known: \\['classifier', 'embedding', 'text'\\]"):
        build_head(SimpleNamespace(type="segmenter"))


def test_each_head_answers_with_its_own_typed_output_tagged_by_its_registry_key():
    heads = {
        "embedding": EmbeddingHead(0.8, 4),
        "classifier": ClassifierHead(["car", "bus"], top_k=2),
        "text": TextHead(["A"]),
    }
    assert set(heads) == set(HEADS)
    inputs = {"embedding": _basis(3, 1), "classifier": np.array([[0.25, 0.75]]), "text": np.eye(2)[None, [1]]}
    outputs = {kind: head(inputs[kind])[0] for kind, head in heads.items()}
    assert outputs == {
        "embedding": wire.EmbeddingOutput(identity_id=0, similarity=1.0, enrolled=True),
        "classifier": wire.ClassifierOutput(labels=("bus", "car"), label_scores=(0.75, 0.25)),
        "text": wire.TextOutput(text="A", text_score=1.0),
    }
    for kind, output in outputs.items():
        assert type(output).__struct_config__.tag == kind
        assert wire.decode(wire.encode(wire.Result(roi_id="r", worker="w", output=output))).output == output


def test_every_head_kind_has_an_output_type_on_the_wire():
    assert {t.__struct_config__.tag for t in wire.HEAD_OUTPUTS} == set(HEADS)


def test_the_head_registry_pairs_every_config_class_of_the_schema_with_a_builder():
    with pytest.raises(ValueError, match=r"differ from the schema's \['classifier', 'embedding', 'text'\]"):
        head_registry((EmbeddingHeadConfig, HEADS["embedding"]))


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

"""ClassifierHead: top-k labels on real MobileNetV2 features through a prototype (softmax) layer, labels from a
list or a file, softmax on/off, and the label-count check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.center.head_models import embed_crops
from vcascade.center.heads import ClassifierHead, build_head, head_input, softmax
from vcascade.core.protocol import wire
from vcascade.core.config import ClassifierHeadConfig

CLASSES = ["bike", "car", "roof"]


@pytest.fixture(scope="module")
def features(demo_recognizer, crops) -> dict[str, np.ndarray]:
    """Real 1280-d MobileNetV2 embeddings of the conftest crops, by crop name."""
    return embed_crops(demo_recognizer, crops)


def _prototype_logits(features: dict[str, np.ndarray], queries: list[str], scale: float = 10.0) -> np.ndarray:
    """(n, 3) logits = scale x cosine similarity to the prototypes bike150, car, roof (nearest class mean)."""
    protos = np.stack([features["bike150"], features["car"], features["roof"]])
    protos /= np.linalg.norm(protos, axis=1, keepdims=True)
    q = np.stack([features[name] for name in queries])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return scale * q @ protos.T


def test_top_k_of_real_features_through_a_softmax_layer(features):
    logits = _prototype_logits(features, ["bike170", "bike180", "car", "roof"])
    head = build_head(ClassifierHeadConfig(type="classifier", labels=CLASSES, top_k=2, softmax=True))
    out = head(logits)
    assert [o.labels[0] for o in out] == ["bike", "bike", "car", "roof"]  # bike170/180 vs the bike150 prototype
    for o, row in zip(out, softmax(logits)):
        assert len(o.labels) == len(o.label_scores) == 2 and o.label_scores[0] >= o.label_scores[1]
        assert o.label_scores == pytest.approx(tuple(np.sort(row)[::-1][:2]), rel=1e-6)
        assert o.labels[1] == CLASSES[int(np.argsort(-row)[1])]
    assert wire.decode(wire.encode(wire.Result(roi_id="r", worker="w", output=out[0]))).output == out[0]


def test_probabilities_pass_through_without_softmax():
    probs = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]], np.float32)
    out = ClassifierHead(CLASSES, top_k=3, softmax=False)(probs)
    assert out[0].labels == ("car", "roof", "bike") and out[0].label_scores == pytest.approx((0.7, 0.2, 0.1))
    assert out[1].labels == ("bike", "roof", "car")


def test_top_k_larger_than_classes_reports_all_and_softmax_rows_sum_to_one():
    out = ClassifierHead(CLASSES, top_k=10, softmax=True)(np.array([[1000.0, 0.0, -1000.0]]))  # no overflow
    assert out[0].labels == ("bike", "car", "roof")
    assert sum(out[0].label_scores) == pytest.approx(1.0) and out[0].label_scores[0] == pytest.approx(1.0)


def test_labels_from_a_file(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("person\nbicycle\ncar\n", encoding="utf-8")
    head = build_head(ClassifierHeadConfig(type="classifier", labels=str(path)))
    assert head(np.array([[0.1, 0.2, 0.7]]))[0].labels == ("car",)


def test_label_count_mismatch_fails_clearly_at_the_first_call(features):
    head = build_head(ClassifierHeadConfig(type="classifier", labels=["a", "b"], softmax=True))
    with pytest.raises(ValueError, match="has 2 labels but the model outputs 3 classes"):
        head(_prototype_logits(features, ["car"]))


def test_bad_arguments():
    with pytest.raises(ValueError):
        ClassifierHead(CLASSES, top_k=0)
    with pytest.raises(ValueError):
        ClassifierHead([])
    with pytest.raises(ValueError, match=r"\(n, C\)"):
        ClassifierHead(CLASSES)(np.zeros((1, 3, 2), np.float32))


def test_head_input_flattens_rows_for_rank_2_heads_and_checks_rows():
    x = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2, 1)  # e.g. (n, C, 1, 1) conv logits
    assert head_input(x, 2, 2).shape == (2, 6)
    assert head_input(x.numpy()[:, :, :, 0], 2, 3).shape == (2, 3, 2)
    with pytest.raises(ValueError, match="rows"):
        head_input(x, 3, 2)
    with pytest.raises(ValueError, match="rank 3"):
        head_input(x, 2, 3)

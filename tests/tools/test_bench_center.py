"""tools/bench_center.py's deployment: the embedder on the torch engine, its split points explicit.

Regression: the demo's ``split_points: auto`` was iterated as a list of names ("a", "u", ...), so the benchmark
died with ``'MobileNetV2_bottle' object has no attribute 'a'``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tools.bench_center import RECOGNIZER, demo_deployment, torch_deployment

from vcascade.center.stages.torch_stages import build_model, split_model
from vcascade.core.config import Deployment


def test_auto_split_points_resolve_to_torch_submodules_for_two_stages():
    raw = demo_deployment()
    assert raw["recognizers"][RECOGNIZER]["split_points"] == "auto"  # what broke the benchmark
    before = copy.deepcopy(raw)
    torch.set_num_threads(1)  # as the benchmark profiles: one thread per stage

    resolved = torch_deployment(raw, stages=2)

    assert raw == before  # the demo dict is left as read
    rec = Deployment.model_validate(resolved).recognizers[RECOGNIZER]  # a stage group accepts it: not auto
    assert rec.engine == "torch"
    (point,) = rec.split_points  # one cut for two stages
    model = build_model(rec)
    assert point in dict(model.named_modules()) and point != ""  # a torch submodule, not an ONNX tensor name
    stages = split_model(model, rec.split_points, torch.zeros((2, 3, *rec.input_hw)))
    assert len(stages) == 2


def test_explicit_split_points_are_kept_as_configured():
    raw = demo_deployment()
    raw["recognizers"][RECOGNIZER].update(engine="torch", split_points=["features.3"])

    resolved = torch_deployment(raw)

    assert resolved["recognizers"][RECOGNIZER]["split_points"] == ["features.3"]
    assert resolved["recognizers"][RECOGNIZER]["engine"] == "torch"


def test_explicit_onnx_tensor_names_are_refused_for_torch_stages():
    raw = demo_deployment()
    raw["recognizers"][RECOGNIZER]["split_points"] = ["/features/features.3/conv/conv.0/conv.0.2/Clip_output_0"]

    with pytest.raises(ValueError, match="not torch submodule names"):
        torch_deployment(raw)

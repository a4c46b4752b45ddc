"""Profiling the real recognizers: torch units in execution order, ONNX nodes attributed to cut segments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vcascade.center.stages.onnx_stages import cut_points, load_onnx
from vcascade.center.stages.profile import candidate_units, profile_onnx, profile_torch
from vcascade.center.stages.torch_stages import build_model

FEATURES = [f"features.{i}" for i in range(19)]


@pytest.fixture(scope="module")
def embedder_model(demo_recognizer):
    return build_model(demo_recognizer)


@pytest.fixture(scope="module")
def ocr(models_dir):
    return load_onnx(models_dir / "PP-OCRv6_rec_small.onnx")


@pytest.fixture(scope="module")
def ocr_profile(ocr):
    sample = np.random.default_rng(0).standard_normal((2, 3, 48, 320), dtype=np.float32)
    return profile_onnx(ocr, sample, runs=2)


def test_mobilenet_units_are_the_features_children(embedder_model):
    assert candidate_units(embedder_model) == FEATURES


def test_torch_profile_in_execution_order_with_positive_costs(embedder_model):
    sample = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    profile = profile_torch(embedder_model, sample, runs=2)
    assert [s.layers for s in profile.segments] == [(name,) for name in FEATURES]
    assert [s.begins_at for s in profile.segments] == [None, *FEATURES[1:]]
    assert all(s.cost_ms > 0 and math.isfinite(s.cost_ms) for s in profile.segments)
    assert profile.batch == 2


def test_profiling_does_not_change_the_model_output(embedder_model):
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        before = embedder_model(x)
    profile_torch(embedder_model, x, runs=1, warmup=0)
    with torch.inference_mode():
        after = embedder_model(x)
    assert torch.allclose(before, after, rtol=0, atol=1e-5)  # channels-last may reorder accumulation only


def test_onnx_profile_covers_every_node_once(ocr, ocr_profile):
    cuts = cut_points(ocr)
    assert len(ocr_profile.segments) == len(cuts) + 1 == 112
    assert [s.begins_at for s in ocr_profile.segments] == [None, *(c.tensor for c in cuts)]
    layers = [name for s in ocr_profile.segments for name in s.layers]
    assert layers == [node.name for node in ocr.graph.node]
    assert all(s.cost_ms >= 0 for s in ocr_profile.segments)
    convs = {n.name for n in ocr.graph.node if n.op_type == "Conv"}
    with_conv = [s for s in ocr_profile.segments if convs & set(s.layers)]
    assert with_conv and all(s.cost_ms > 0 for s in with_conv)  # real kernels were attributed
    assert sum(ocr_profile.costs_ms) > 0


def test_split_point_names_round_trip(ocr_profile):
    names = [ocr_profile.segments[i].begins_at for i in (10, 50)]
    assert ocr_profile.cuts_of(names) == [10, 50]
    assert ocr_profile.split_points_of([10, 50]) == names
    with pytest.raises(ValueError, match="'Conv.0x' is not a place where this model can be split"):
        ocr_profile.cuts_of(["Conv.0x"])


def test_runs_must_be_positive(ocr, embedder_model):
    with pytest.raises(ValueError):
        profile_onnx(ocr, np.zeros((1, 3, 48, 320), np.float32), runs=0)
    with pytest.raises(ValueError):
        profile_torch(embedder_model, torch.zeros(1, 3, 224, 224), runs=0)


def test_calibration_scales_each_stage_to_its_measured_time(ocr_profile):
    from vcascade.center.stages.balance import plan_for_cuts

    cuts = [40, 80]
    calibrated = ocr_profile.calibrated(cuts, [10.0, 20.0, 30.0])
    assert plan_for_cuts(calibrated.costs_ms, cuts).stage_ms == pytest.approx((10.0, 20.0, 30.0))
    assert [s.layers for s in calibrated.segments] == [s.layers for s in ocr_profile.segments]
    ratios = [c / o for c, o in zip(calibrated.costs_ms[:40], ocr_profile.costs_ms[:40]) if o > 0]
    assert max(ratios) == pytest.approx(min(ratios))  # one factor per stage: shares inside a stage are kept
    with pytest.raises(ValueError, match="3 stages but 2 measured"):
        ocr_profile.calibrated(cuts, [1.0, 2.0])

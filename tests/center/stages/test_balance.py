"""Balancing stage costs: the DP equals the exhaustive optimum, on hand-made and on real profiled costs."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from vcascade.center.stages.balance import Plan, balance, plan_for_cuts
from vcascade.center.stages.onnx_stages import load_onnx
from vcascade.center.stages.profile import profile_onnx, profile_torch
from vcascade.center.stages.torch_stages import build_model


def brute_force(costs_ms: Sequence[float], num_stages: int, allowed: Sequence[int] | None = None) -> Plan:
    """The optimal plan by trying every combination of K-1 allowed cuts (C(m, K-1) plans: small problems only),
    the oracle the DP is checked against."""
    positions = sorted(set(range(1, len(costs_ms)) if allowed is None else allowed))
    plans = (plan_for_cuts(costs_ms, cuts) for cuts in itertools.combinations(positions, num_stages - 1))
    return min(plans, key=lambda plan: plan.max_ms)


@pytest.fixture(scope="module")
def ocr_costs(models_dir) -> list[float]:
    """Real per-segment costs (112 segments) of PP-OCRv6_rec_small on a (2, 3, 48, 320) batch, ms."""
    model = load_onnx(models_dir / "PP-OCRv6_rec_small.onnx")
    sample = np.random.default_rng(0).standard_normal((2, 3, 48, 320), dtype=np.float32)
    return profile_onnx(model, sample, runs=2).costs_ms


@pytest.fixture(scope="module")
def embedder_costs(demo_recognizer) -> list[float]:
    """Real per-unit costs (features.0..18) of the MobileNetV2 embedder on a (2, 3, 224, 224) batch, ms."""
    sample = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return profile_torch(build_model(demo_recognizer), sample, runs=2).costs_ms


def test_hand_made_example():
    plan = balance([1, 2, 3, 4, 5, 6, 7, 8, 9], 3)  # Skiena's example: {1..5 | 6, 7 | 8, 9}: max 17
    assert plan.cuts == (5, 7)
    assert plan.stage_ms == (15, 13, 17)
    assert plan.max_ms == 17 and plan.total_ms == 45
    assert plan.ratio == pytest.approx(17 / 15)


def test_one_stage_is_the_whole_model():
    assert balance([3.0, 1.0], 1) == Plan((), (4.0,))


def test_allowed_positions_are_respected():
    plan = balance([5, 1, 1, 1, 5], 2, allowed=[1, 4])
    assert plan.cuts in ((1,), (4,))
    assert set(plan.cuts) <= {1, 4}


@pytest.mark.parametrize("seed", range(30))
def test_dp_equals_brute_force_on_random_costs(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    costs = [rng.uniform(0, 20) for _ in range(n)]
    k = rng.randint(1, n)
    allowed = sorted(rng.sample(range(1, n), rng.randint(k - 1, n - 1)))
    assert balance(costs, k, allowed).max_ms == pytest.approx(brute_force(costs, k, allowed).max_ms, rel=1e-12)


@pytest.mark.parametrize("num_stages", [2, 3])
def test_dp_on_real_ocr_profile_equals_exhaustive_optimum(ocr_costs, num_stages):
    assert len(ocr_costs) == 112
    chosen = balance(ocr_costs, num_stages)
    optimum = brute_force(ocr_costs, num_stages)
    assert chosen.max_ms <= 1.2 * optimum.max_ms
    assert chosen.max_ms == pytest.approx(optimum.max_ms, rel=1e-12)
    assert len(chosen.cuts) == num_stages - 1


@pytest.mark.parametrize("num_stages", [2, 3, 4])
def test_dp_on_real_embedder_profile_equals_exhaustive_optimum(embedder_costs, num_stages):
    assert len(embedder_costs) == 19
    chosen = balance(embedder_costs, num_stages)
    optimum = brute_force(embedder_costs, num_stages)
    assert chosen.max_ms <= 1.2 * optimum.max_ms
    assert chosen.max_ms == pytest.approx(optimum.max_ms, rel=1e-12)
    assert chosen.ratio >= 1.0


def test_balanced_plan_beats_the_naive_equal_layer_count_split(embedder_costs):
    naive = plan_for_cuts(embedder_costs, [len(embedder_costs) // 2])
    assert balance(embedder_costs, 2).max_ms <= naive.max_ms


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="num_stages"):
        balance([1.0], 0)
    with pytest.raises(ValueError, match=">= 0"):
        balance([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="3 stages need 2 cut points; only 1"):
        balance([1.0, 2.0, 3.0], 3, allowed=[1])
    with pytest.raises(ValueError, match="inside 1..2"):
        balance([1.0, 2.0, 3.0], 2, allowed=[3])
    with pytest.raises(ValueError, match="strictly increasing"):
        plan_for_cuts([1.0, 2.0, 3.0], [2, 1])

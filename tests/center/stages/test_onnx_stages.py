"""Cutting the real ONNX models (PP-OCRv6 text recognizer, YOLOX-nano) into stages keeps their output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.center.chain import run_chained
from vcascade.center.stages.onnx_stages import (
    OnnxStage,
    build_onnx_stages,
    check_split_points,
    cut_points,
    load_onnx,
    make_session,
    session_options,
    split_onnx,
)
from vcascade.center.stages.onnx_contract import ModelContractError
from vcascade.center.stages.runtimes import load_recognizer_stages, warm_up
from vcascade.core.config import OnnxRecognizerConfig

OCR_FILE = "PP-OCRv6_rec_small.onnx"


@pytest.fixture(scope="module")
def ocr(models_dir: Path):
    return load_onnx(models_dir / OCR_FILE)


@pytest.fixture(scope="module")
def yolox(yolox_path: Path):
    return load_onnx(yolox_path)


@pytest.fixture(scope="module")
def ocr_input() -> np.ndarray:
    """(2, 3, 48, 320) float32 in the model's -1..1 input range."""
    return np.random.default_rng(1).uniform(-1, 1, (2, 3, 48, 320)).astype(np.float32)


def whole(model, x: np.ndarray) -> np.ndarray:
    return OnnxStage(model)((x,))[0]


def evenly_spaced(model, num_stages: int) -> list[str]:
    cuts = cut_points(model)
    return [cuts[round(i * len(cuts) / num_stages)].tensor for i in range(1, num_stages)]


def test_cut_point_counts_of_the_real_models(ocr, yolox):
    assert len(cut_points(ocr)) == 111  # as counted in shared/models/README.md
    assert len(cut_points(yolox)) == 18
    order = [cut.node_index for cut in cut_points(ocr)]
    assert order == sorted(order) and len(set(order)) == len(order)


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_ocr_split_equals_unsplit(ocr, ocr_input, num_stages):
    points = evenly_spaced(ocr, num_stages)
    stages = build_onnx_stages(ocr, points, ["cpu"] * num_stages)
    assert len(stages) == num_stages
    out = run_chained(stages, ocr_input)
    expected = whole(ocr, ocr_input)
    assert out.shape == expected.shape and out.shape[0] == 2 and out.shape[2] == 18710
    # float32 rounding only: ORT fuses differently where a boundary separates two fusable nodes (~4e-6 relative)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_yolox_split_equals_unsplit(yolox, num_stages):
    x = np.random.default_rng(2).uniform(0, 255, (1, 3, 416, 416)).astype(np.float32)
    stages = build_onnx_stages(yolox, evenly_spaced(yolox, num_stages), ["cpu"] * num_stages)
    out = run_chained(stages, x)
    assert out.shape == (1, 3549, 85)
    np.testing.assert_allclose(out, whole(yolox, x), rtol=1e-5, atol=1e-4)


def test_stage_boundaries_carry_exactly_the_cut_tensor(ocr):
    points = evenly_spaced(ocr, 3)
    parts = split_onnx(ocr, points)
    assert [o.name for o in parts[0].graph.output] == [points[0]]
    assert [i.name for i in parts[1].graph.input] == [points[0]]
    assert [o.name for o in parts[1].graph.output] == [points[1]]
    assert [o.name for o in parts[2].graph.output] == ["fetch_name_0"]


def test_stage_accepts_torch_tensors_and_returns_numpy(ocr, ocr_input):
    stage = OnnxStage(split_onnx(ocr, evenly_spaced(ocr, 2))[0])
    from_numpy = stage((ocr_input,))
    from_torch = stage((torch.from_numpy(ocr_input.copy()),))
    assert isinstance(from_torch, tuple) and isinstance(from_torch[0], np.ndarray)
    np.testing.assert_array_equal(from_numpy[0], from_torch[0])
    with pytest.raises(ValueError, match="takes 1 inputs"):
        stage((ocr_input, ocr_input))


def test_bad_cut_point_names_it_and_lists_valid_ones(ocr):
    with pytest.raises(ValueError) as err:
        check_split_points(ocr, ["p2o.pd_op.conv2d.0.0", "no_such_tensor"])
    message = str(err.value)
    assert "'no_such_tensor'" in message and "111 valid cut points" in message
    assert cut_points(ocr)[0].tensor in message


def test_tensor_that_is_not_a_single_live_tensor_is_refused(ocr):
    valid = {cut.tensor for cut in cut_points(ocr)}
    internal = next(n.output[0] for n in ocr.graph.node if n.output[0] not in valid and n.op_type == "Conv")
    with pytest.raises(ValueError, match="not a tensor where this ONNX graph can be cut"):
        split_onnx(ocr, [internal])


def test_split_points_out_of_order_are_refused(ocr):
    with pytest.raises(ValueError, match="topological order"):
        split_onnx(ocr, list(reversed(evenly_spaced(ocr, 3))))


def test_device_count_must_match_stages(ocr):
    with pytest.raises(ValueError, match="2 devices for 3 stages"):
        build_onnx_stages(ocr, evenly_spaced(ocr, 3), ["cpu", "cpu"])


def test_session_options_threads_and_no_spinning(ocr):
    stage = OnnxStage(ocr, "cpu", intra_op_threads=2)
    options = stage.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert not options.enable_mem_pattern  # a pattern per batch size would keep adding memory
    assert session_options().enable_mem_pattern  # the detector: one input shape (at most max_batch of them)
    spinning = session_options(1, allow_spinning=True)
    assert spinning.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    with pytest.raises(ValueError):
        session_options(0)


def test_unknown_device_string_is_refused(ocr):
    with pytest.raises(ValueError, match="gpu0"):
        make_session(ocr, "gpu0", session_options())


def test_cuda_stage_runs_there_or_fails_naming_the_device(ocr, ocr_input):
    """On a host with a GPU the CUDA stage equals the CPU one; without, a clear error (never a CPU fallback)."""
    try:
        stage = OnnxStage(ocr, "cuda:0")
    except RuntimeError as exc:
        assert "cuda:0" in str(exc)
        return
    assert "CUDAExecutionProvider" in stage.session.get_providers()
    np.testing.assert_allclose(stage((ocr_input,))[0], whole(ocr, ocr_input), rtol=1e-3, atol=1e-4)


def ocr_config(**overrides) -> OnnxRecognizerConfig:
    fields = dict(type="onnx", model=OCR_FILE, input_hw=(48, 320), channel_order="bgr", mean=(0.5,) * 3,
                  std=(0.5,) * 3, resize="keep_ratio_pad")  # fmt: skip
    return OnnxRecognizerConfig(**{**fields, **overrides})


def test_runtime_loads_explicit_split_from_the_model_dir(ocr, ocr_input, models_dir):
    points = evenly_spaced(ocr, 2)
    stages = load_recognizer_stages(ocr_config(split_points=points), ["cpu", "cpu"], model_dir=models_dir)
    assert [type(s) for s in stages] == [OnnxStage, OnnxStage]
    np.testing.assert_allclose(run_chained(stages, ocr_input), whole(ocr, ocr_input), rtol=1e-5, atol=1e-6)


def test_runtime_auto_split_profiles_and_stays_exact(ocr, ocr_input, models_dir):
    cfg = ocr_config(split_points="auto")
    stages = load_recognizer_stages(cfg, ["cpu", "cpu"], sample_batch=ocr_input, model_dir=models_dir)
    assert len(stages) == 2
    valid = {cut.tensor for cut in cut_points(ocr)}
    assert stages[0].output_names[0] in valid
    np.testing.assert_allclose(run_chained(stages, ocr_input), whole(ocr, ocr_input), rtol=1e-5, atol=1e-6)


def test_missing_model_lists_searched_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found.*searched"):
        load_recognizer_stages(ocr_config(model="nope.onnx"), ["cpu"], model_dir=tmp_path)


def test_auto_split_of_a_fixed_batch_model_profiles_at_its_batch(yolox, yolox_path):
    """YOLOX-nano fixes batch 1: the default 4-item profiling sample is cut to fit, and the split stays exact."""
    cfg = OnnxRecognizerConfig(type="onnx", model=str(yolox_path), input_hw=(416, 416), split_points="auto")
    stages = load_recognizer_stages(cfg, ["cpu", "cpu"])
    x = np.random.default_rng(3).uniform(0, 255, (1, 3, 416, 416)).astype(np.float32)
    np.testing.assert_allclose(run_chained(stages, x), whole(yolox, x), rtol=1e-5, atol=1e-4)


def test_warm_up_runs_a_full_micro_batch_or_names_the_batch_it_failed_on(ocr, yolox_path, models_dir):
    cfg = ocr_config(split_points=evenly_spaced(ocr, 2))
    assert warm_up(load_recognizer_stages(cfg, ["cpu", "cpu"], model_dir=models_dir), cfg, "cpu", 3) > 0
    fixed = OnnxRecognizerConfig(type="onnx", model=str(yolox_path), input_hw=(416, 416))  # batch fixed at 1
    (stage,) = load_recognizer_stages(fixed, ["cpu"])
    assert stage.fixed_batch == 1
    assert warm_up([stage], fixed, "cpu", 8) > 0  # warmed up at the model's own batch, not 8
    wrong_size = ocr_config(input_hw=(32, 320), split_points=evenly_spaced(ocr, 2))  # the model takes height 48
    with pytest.raises(ModelContractError, match=r"PP-OCRv6_rec_small.onnx: input x .*expected \(N, 3, 32, 320\)"):
        load_recognizer_stages(wrong_size, ["cpu", "cpu"], model_dir=models_dir)  # refused before any stage is built
    unchecked = build_onnx_stages(ocr, wrong_size.split_points, ["cpu", "cpu"])  # built past that check
    with pytest.raises(RuntimeError, match="warm-up micro-batch of 2 failed in stage 0"):
        warm_up(unchecked, wrong_size, "cpu", 2)

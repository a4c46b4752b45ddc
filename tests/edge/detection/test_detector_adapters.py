"""YOLO-family adapters on small ONNX models exported from torch whose raw outputs are known by construction.

Each test model emits a hand-written prediction tensor for every image of its batch; one score in it is
multiplied by a probe pixel of the network input, so frames painted in different colours get different scores and
a mix-up of batch order or of frames shows. The expected frame-px boxes are worked out by hand below from each
family's reference letterbox (YOLOX top-left, Ultralytics centred; ``edge/detection/letterbox.py`` cites both).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from vcascade.core.config import Yolov5DetectorConfig, Yolov8DetectorConfig, YoloxDetectorConfig
from vcascade.edge.detection import (
    DetectorContractError,
    Yolov5Detector,
    Yolov8Detector,
    YoloxDetector,
    build_detector,
    load_class_names,
)

torch.set_num_threads(1)
cv2.setNumThreads(1)
pytestmark = pytest.mark.filterwarnings("ignore:.*(legacy TorchScript-based ONNX export|feature will be removed)")

S = 64  # network input side, px
NAMES = ("person", "bicycle", "car", "motorbike", "bus", "truck")  # 6 classes: ids 0..5
N_ROWS = 8  # candidate boxes in the Ultralytics test outputs; rows 6 and 7 are all zero (score 0)

# Frames (h, w) and their centred letterbox into 64 x 64 (Ultralytics LetterBox, auto=False), worked by hand:
#   A (32, 128): r = min(64/32, 64/128) = 0.5, resized 64 x 16, dh = 48 -> top = round(24 - 0.1) = 24, left = 0
#   B (128, 64): r = 0.5, resized 32 x 64, dw = 32 -> left = 16, top = 0
#   C (48, 40):  r = min(64/48, 64/40) = 4/3, resized round(53.33) = 53 x 64, dw = 11 -> left = round(5.4) = 5
FRAMES_HW = [(32, 128), (128, 64), (48, 40)]
CENTRED = [(0.5, 0, 24), (0.5, 16, 0), (4 / 3, 5, 0)]  # (r, left, top) per frame
RED = [255, 204, 153]  # probe (red channel / 255 at the canvas centre): 1.0, 0.8, 0.6


def _frames(red=RED) -> list[np.ndarray]:
    """Uniform BGR frames of FRAMES_HW; blue 10, green 20, red as given."""
    return [np.full((h, w, 3), (10, 20, r), np.uint8) for (h, w), r in zip(FRAMES_HW, red)]


def _inverse(box, r, left, top, hw) -> list[float]:
    """Canvas px -> frame px: (x - left) / r, (y - top) / r, clipped to the frame."""
    h, w = hw
    x1, y1, x2, y2 = box
    return [min(max(v, 0), lim) for v, lim in (((x1 - left) / r, w), ((y1 - top) / r, h), ((x2 - left) / r, w),
                                                ((y2 - top) / r, h))]


# Hand-written candidates in canvas px (x1, y1, x2, y2), best class and score, for both Ultralytics layouts:
#   0: car 0.9 x probe            1: car 0.8, IoU with 0 = 14*12 / (18*12) = 0.78 -> one of them is suppressed
#   2: truck 0.665 (same place as 0: other class, survives)   3: motorbike 0.18 (< threshold 0.3, dropped)
#   4: person 0.5, partly outside the frame in A and B (clipped)   5: bus 0.7 wholly in the padding of A and B
BOXES = [(20, 26, 36, 38), (22, 26, 40, 38), (20, 26, 36, 38), (30, 28, 40, 36), (40, 30, 60, 50), (1, 2, 9, 10)]


def _v5_rows() -> np.ndarray:
    """(N_ROWS, 5 + 6) YOLOv5 rows [cx, cy, w, h, objectness, 6 class scores]; score = obj x cls."""
    rows = np.zeros((N_ROWS, 5 + len(NAMES)), np.float32)
    for i, ((x1, y1, x2, y2), obj, cls, cls_score) in enumerate(
        zip(BOXES, [0.9, 1.0, 0.95, 0.9, 1.0, 1.0], [2, 2, 5, 3, 0, 4], [1.0, 0.8, 0.7, 0.2, 0.5, 0.7])
    ):
        rows[i, :5] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, obj]
        rows[i, 5 + cls] = cls_score
        rows[i, 5 + (cls + 1) % len(NAMES)] = cls_score / 2  # a runner-up class that must not win
    return rows


def _v8_columns() -> np.ndarray:
    """(4 + 6, N_ROWS) YOLOv8 columns [cx, cy, w, h, 6 class scores] with the same boxes and final scores."""
    v5 = _v5_rows()
    return np.concatenate([v5[:, :4], v5[:, 4:5] * v5[:, 5:]], axis=1).T.copy()


class ConstantHead(torch.nn.Module):
    """Returns ``pred`` for each image of the batch, entry ``probe_entry`` times input[b, 0, y, x] * scale."""

    def __init__(self, pred: np.ndarray, probe_entry: tuple[int, int], probe_yx: tuple[int, int], scale: float):
        super().__init__()
        mask = np.zeros_like(pred)
        mask[probe_entry] = 1
        self.register_buffer("pred", torch.from_numpy(pred))
        self.register_buffer("mask", torch.from_numpy(mask))
        self.probe_yx, self.scale = probe_yx, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probe = x[:, 0, self.probe_yx[0], self.probe_yx[1]] * self.scale
        return self.pred * (1 + (probe[:, None, None] - 1) * self.mask)


class Uint8Input(torch.nn.Module):
    """A head behind a uint8 image input (a dtype no detector accepts)."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.float())


def export(module: torch.nn.Module, path: Path, *, batch: int | None, size: int = S, dtype=torch.float32) -> Path:
    """Export with opset 17; ``batch=None`` makes the batch dimension dynamic."""
    example = torch.zeros((batch or 2, 3, size, size), dtype=dtype)
    dynamic = {"images": {0: "batch"}, "output0": {0: "batch"}} if batch is None else None
    torch.onnx.export(
        module.eval(), (example,), str(path), input_names=["images"], output_names=["output0"],
        opset_version=17, dynamo=False, dynamic_axes=dynamic,
    )
    return path


def v5_model(tmp_path: Path, *, batch: int | None = None, half: bool = False, name: str = "v5.onnx") -> Path:
    head = ConstantHead(_v5_rows(), (0, 4), (S // 2, S // 2), 1.0)  # objectness of row 0 x red
    return export(head.half() if half else head, tmp_path / name, batch=batch,
                  dtype=torch.float16 if half else torch.float32)


def v8_model(tmp_path: Path, *, batch: int | None = None, name: str = "v8.onnx") -> Path:
    return export(ConstantHead(_v8_columns(), (4 + 2, 0), (S // 2, S // 2), 1.0), tmp_path / name, batch=batch)


def _expected_ultralytics(frame: int) -> list[tuple[int, float, list[float]]]:
    """(class, score, frame-px box) expected for frame A/B/C (0/1/2), highest score first."""
    r, left, top = CENTRED[frame]
    hw = FRAMES_HW[frame]
    car0 = 0.9 * RED[frame] / 255
    found = [(2, car0, 0), (2, 0.8, 1), (5, 0.665, 2), (0, 0.5, 4), (4, 0.7, 5)]
    found = [f for f in found if not (f[2] == 1 and car0 > 0.8) and not (f[2] == 0 and car0 < 0.8)]  # NMS
    if frame in (0, 1):  # box 5 lies wholly in the padding of A (rows < 24) and B (columns < 16)
        found = [f for f in found if f[2] != 5]
    found.sort(key=lambda f: -f[1])
    return [(cls, score, _inverse(BOXES[i], r, left, top, hw)) for cls, score, i in found]


def _assert_matches(dets, expected, atol=1e-3):
    assert [int(c) for c in dets.class_id] == [c for c, _, _ in expected]
    np.testing.assert_allclose(dets.score, [s for _, s, _ in expected], atol=atol)
    np.testing.assert_allclose(dets.xyxy, [b for _, _, b in expected], atol=atol * 100)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    return {
        "v5_dynamic": v5_model(folder, name="v5_dynamic.onnx"),
        "v5_fixed1": v5_model(folder, batch=1, name="v5_fixed1.onnx"),
        "v5_fixed2": v5_model(folder, batch=2, name="v5_fixed2.onnx"),
        "v5_half": v5_model(folder, half=True, name="v5_half.onnx"),
        "v8_dynamic": v8_model(folder, name="v8_dynamic.onnx"),
        "v8_fixed1": v8_model(folder, batch=1, name="v8_fixed1.onnx"),
    }


def _open(cls, path, **kwargs):
    return cls(path, input_size=S, class_names=NAMES, score_threshold=0.3, intra_op_threads=1, **kwargs)


# ---------------------------------------------------------------- Ultralytics layouts


@pytest.mark.parametrize("key,cls", [("v5_dynamic", Yolov5Detector), ("v8_dynamic", Yolov8Detector)])
def test_batch_of_three_sizes_decodes_suppresses_and_maps_back(models, key, cls):
    detector = _open(cls, models[key])
    results = detector.detect_batch(_frames())
    assert detector.session_runs == 1 and detector.frames_per_run == 8
    for frame, dets in enumerate(results):
        _assert_matches(dets, _expected_ultralytics(frame))
    np.testing.assert_allclose(results[2].xyxy[0], _inverse(BOXES[1], 4 / 3, 5, 0, (48, 40)))  # C: row 1 won


def test_fixed_batch_one_runs_frame_by_frame_with_the_same_results(models):
    one_by_one = _open(Yolov8Detector, models["v8_fixed1"])
    batched = _open(Yolov8Detector, models["v8_dynamic"])
    frames = _frames()
    singles, together = one_by_one.detect_batch(frames), batched.detect_batch(frames)
    assert one_by_one.session_runs == 3 and one_by_one.frames_per_run == 1 and batched.session_runs == 1
    for a, b in zip(singles, together):
        np.testing.assert_array_equal(a.class_id, b.class_id)
        np.testing.assert_allclose(a.xyxy, b.xyxy, atol=1e-4)
        np.testing.assert_allclose(a.score, b.score, atol=1e-6)


def test_fixed_batch_two_pads_the_last_run_and_max_batch_splits_dynamic_runs(models):
    fixed = _open(Yolov5Detector, models["v5_fixed2"])
    results = fixed.detect_batch(_frames())
    assert fixed.session_runs == 2 and len(results) == 3  # frames A+B, then C plus a discarded copy of C
    for frame, dets in enumerate(results):
        _assert_matches(dets, _expected_ultralytics(frame))
    split = _open(Yolov5Detector, models["v5_dynamic"], max_batch=2)
    for frame, dets in enumerate(split.detect_batch(_frames())):
        _assert_matches(dets, _expected_ultralytics(frame))
    assert split.session_runs == 2


def test_single_frame_call_and_empty_batch(models):
    detector = _open(Yolov5Detector, models["v5_fixed1"])
    _assert_matches(detector(_frames()[2]), _expected_ultralytics(2))
    assert detector.detect_batch([]) == [] and detector.session_runs == 1


def test_float16_model_is_fed_float16_and_decodes_like_float32(models):
    detector = _open(Yolov5Detector, models["v5_half"])
    assert detector.input.dtype == np.float16
    for frame, dets in enumerate(detector.detect_batch(_frames())):
        _assert_matches(dets, _expected_ultralytics(frame), atol=2e-3)  # fp16: 11-bit mantissa, boxes <= 64 px


def test_class_filter_keeps_only_those_classes(models):
    detector = _open(Yolov8Detector, models["v8_dynamic"], class_ids=[5, 0])
    for frame, dets in enumerate(detector.detect_batch(_frames())):
        _assert_matches(dets, [e for e in _expected_ultralytics(frame) if e[0] in (0, 5)])


def test_bad_frame_in_a_batch_is_named_by_index(models):
    detector = _open(Yolov5Detector, models["v5_dynamic"])
    with pytest.raises(ValueError, match="image 1: frame must be a uint8"):
        detector.detect_batch([_frames()[0], np.zeros((8, 8, 3), np.float32)])
    assert detector.session_runs == 0


# ---------------------------------------------------------------- YOLOX layout (grid decoding, top-left letterbox)

# 64 x 64 input: anchors 8*8 (stride 8) + 4*4 (stride 16) + 2*2 (stride 32) = 84, rows [cx, cy, log w, log h, obj, 6].
# Row 69 = stride 16, cell (gx=1, gy=1) = 64 + 1*4 + 1: cx 0.5, cy 0.25, w = exp(ln 2) * 16 = 32, h = exp(0) * 16
#   -> centre ((0.5 + 1) * 16, (0.25 + 1) * 16) = (24, 20): canvas box (8, 12, 40, 28), car, obj 0.9 x blue/255.
# Row 80 = stride 32, cell (0, 0): cx 0.5, cy 0.5, w = h = exp(0) * 32 -> centre (16, 16), box (0, 0, 32, 32), bus 0.6.
# Top-left letterbox (YOLOX preproc): A r = 0.5, B r = 0.5, C r = 4/3 (resized int(53.33) = 53 x 64); no offset.
YOLOX_RATIO = [0.5, 0.5, 4 / 3]


def yolox_model(tmp_path: Path) -> Path:
    rows = np.zeros((84, 5 + len(NAMES)), np.float32)
    rows[69, :5], rows[69, 5 + 2] = [0.5, 0.25, np.log(2.0), 0.0, 0.9], 1.0
    rows[80, :5], rows[80, 5 + 4] = [0.5, 0.5, 0.0, 0.0, 1.0], 0.6
    return export(ConstantHead(rows, (69, 4), (0, 0), 1 / 255), tmp_path / "yolox.onnx", batch=None)


def test_yolox_grid_decoding_and_top_left_mapping_in_a_batch(tmp_path):
    detector = YoloxDetector(yolox_model(tmp_path), input_size=S, class_names=NAMES, intra_op_threads=1)
    blue = [255, 153, 51]  # YOLOX feeds BGR 0..255: the probe is the blue value at canvas (0, 0), / 255
    frames = [np.full((h, w, 3), (b, 20, 30), np.uint8) for (h, w), b in zip(FRAMES_HW, blue)]
    results = detector.detect_batch(frames)
    assert detector.session_runs == 1
    for frame, dets in enumerate(results):
        r, hw = YOLOX_RATIO[frame], FRAMES_HW[frame]
        car = (2, 0.9 * blue[frame] / 255, _inverse((8, 12, 40, 28), r, 0, 0, hw))
        bus = (4, 0.6, _inverse((0, 0, 32, 32), r, 0, 0, hw))
        expected = sorted([e for e in (car, bus) if e[1] >= 0.3], key=lambda e: -e[1])
        _assert_matches(dets, expected)
    assert len(results[2]) == 1  # frame C: car score 0.9 * 51/255 = 0.18 < 0.3


# ---------------------------------------------------------------- contract errors at start-up


def test_yolov8_layout_configured_as_yolov5_is_refused_with_a_hint(models):
    with pytest.raises(DetectorContractError, match=r"v8_dynamic.onnx.*type yolov5.*\[B, N, 5\+C\].*transposed.*yolov8"):
        _open(Yolov5Detector, models["v8_dynamic"])
    with pytest.raises(DetectorContractError, match=r"transposed.*yolov5 or yolox"):
        _open(Yolov8Detector, models["v5_dynamic"])


def test_class_count_must_match_class_names(models):
    with pytest.raises(DetectorContractError, match=r"80 class names.*= \(B, N, 85\).*11 values per box = 5 \+ 6"):
        Yolov5Detector(models["v5_dynamic"], input_size=S)


def test_wrong_input_size_is_refused(models):
    with pytest.raises(DetectorContractError, match=r"v5_fixed1.onnx.*input_size 96.*\(B, 3, 96, 96\).*64, 64"):
        Yolov5Detector(models["v5_fixed1"], input_size=96, class_names=NAMES)


def test_input_dtype_other_than_float_is_refused(tmp_path):
    path = export(Uint8Input(ConstantHead(_v5_rows(), (0, 4), (0, 0), 1.0)), tmp_path / "u8.onnx", batch=1,
                  dtype=torch.uint8)
    with pytest.raises(DetectorContractError, match=r"u8.onnx.*expected input float32 or float16.*tensor\(uint8\)"):
        _open(Yolov5Detector, path)


# ---------------------------------------------------------------- registry, class names, real YOLOX-nano


def test_registry_builds_each_type_from_config(models, tmp_path):
    names_file = tmp_path / "names.txt"
    names_file.write_text("\n".join(NAMES) + "\n\n")
    assert load_class_names(str(names_file)) == NAMES
    cfg = Yolov8DetectorConfig(type="yolov8", path=str(models["v8_dynamic"]), input_size=S,
                               class_names=str(names_file), classes=["truck"], max_batch=2)
    detector = build_detector(cfg, models["v8_dynamic"])
    assert isinstance(detector, Yolov8Detector) and detector.frames_per_run == 2
    assert all(set(d.class_id) <= {5} for d in detector.detect_batch(_frames()))
    cfg5 = Yolov5DetectorConfig(type="yolov5", path="x.onnx", input_size=S, class_names=list(NAMES), classes=["kite"])
    with pytest.raises(ValueError, match="kite"):
        build_detector(cfg5, models["v5_dynamic"])
    with pytest.raises(ValueError, match="more than once"):
        load_class_names(["a", "b", "a"])


def test_real_yolox_nano_through_the_registry(yolox_path, bikes_path):
    capture = cv2.VideoCapture(str(bikes_path))
    for _ in range(121):  # frame 120: a cyclist on a bicycle
        ok, frame = capture.read()
        assert ok
    capture.release()
    detector = build_detector(YoloxDetectorConfig(), yolox_path)
    assert isinstance(detector, YoloxDetector) and detector.frames_per_run == 1  # YOLOX-nano is fixed at batch 1
    small = cv2.resize(frame, (320, 136))
    single, batch = detector(frame), detector.detect_batch([frame, small, frame])
    assert detector.session_runs == 4
    assert np.any(np.isin(single.class_id, [0, 1]) & (single.score > 0.5))
    np.testing.assert_allclose(batch[0].xyxy, single.xyxy, atol=1e-3)
    np.testing.assert_allclose(batch[2].xyxy, single.xyxy, atol=1e-3)
    assert np.all(batch[1].xyxy[:, [0, 2]] <= 320) and np.all(batch[1].xyxy[:, [1, 3]] <= 136)
    assert np.any(np.isin(batch[1].class_id, [0, 1]))

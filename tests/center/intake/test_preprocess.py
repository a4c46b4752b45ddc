"""Preparing a micro-batch: stale ROIs, crop decoding, resize, normalisation into the first stage's input."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

from vcascade.center.intake.microbatch import RoiItem
from vcascade.center.intake.preprocess import (
    DecodeError,
    PreprocessSpec,
    decode_crops,
    decode_jpeg,
    normalise_on_device,
    prepare_micro_batch,
    resize_crops,
    split_stale,
    stack_batch,
    to_device,
    to_input,
)
from vcascade.core.protocol import wire

IMAGENET = PreprocessSpec((224, 224), "rgb", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
SPEC = PreprocessSpec((32, 16), "rgb", (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def roi_item(roi_id: str, payload: bytes = b"", t_received_s: float | None = None, ttl_ms: float = 0.0) -> RoiItem:
    """An ROI as the worker's IO thread receives it (received now unless ``t_received_s`` is given)."""
    roi = wire.Roi(roi_id=roi_id, camera="c", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                   xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.9, ttl_ms=ttl_ms)
    received_s = time.perf_counter() if t_received_s is None else t_received_s
    return RoiItem(roi, payload, 0, received_s)


def _ids(items: list[RoiItem]) -> list[str]:
    return [item.roi.roi_id for item in items]


def _png(image: np.ndarray) -> bytes:
    return cv2.imencode(".png", image)[1].tobytes()  # lossless, so pixel values are exact


def test_decode_jpeg_returns_bgr_uint8(crops):
    image = decode_jpeg(crops["bike150"])
    assert image.dtype == np.uint8 and image.shape == (232, 140, 3)


@pytest.mark.parametrize("payload", [b"", b"\xff\xd8\xff garbage, not a JPEG", bytes(1000)])
def test_decode_jpeg_rejects_garbage(payload):
    with pytest.raises(DecodeError):
        decode_jpeg(payload)


def test_to_input_rgb_order_and_imagenet_normalisation():
    image = np.zeros((10, 20, 3), np.uint8)
    image[...] = (255, 0, 51)  # BGR: blue 255, green 0, red 51
    x = to_input(decode_jpeg(_png(image)), IMAGENET)
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    expected_rgb = [(51 / 255 - 0.485) / 0.229, (0 - 0.456) / 0.224, (1 - 0.406) / 0.225]
    np.testing.assert_allclose(x.reshape(3, -1).mean(axis=1), expected_rgb, rtol=1e-5)


def test_to_input_bgr_keeps_channel_order_and_resizes_to_h_w():
    image = np.zeros((10, 20, 3), np.uint8)
    image[..., 0] = 200
    spec = PreprocessSpec((48, 96), "bgr", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    x = to_input(image, spec)
    assert x.shape == (3, 48, 96)
    np.testing.assert_allclose(x[0], 200 / 255, rtol=1e-6)
    assert not x[1:].any()


def test_stack_batch_is_nchw_float32_and_refuses_empty():
    batch = stack_batch([np.zeros((3, 4, 5), np.float32), np.ones((3, 4, 5), np.float32)])
    assert batch.shape == (2, 3, 4, 5) and batch.dtype == np.float32
    with pytest.raises(ValueError):
        stack_batch([])


def test_to_device_cpu_shares_memory_with_the_array():
    array = np.ones((2, 3), np.float32)
    tensor = to_device(array, "cpu")
    assert tensor.device == torch.device("cpu")
    assert tensor.data_ptr() == array.ctypes.data


# ---------------------------------------------------------------- keep_ratio_pad (text recognition)

PPOCR = PreprocessSpec((48, 320), "bgr", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "keep_ratio_pad")


def _paddle_resize_norm_img(img: np.ndarray, image_shape=(3, 48, 320)) -> np.ndarray:
    """PaddleOCR's reference (tools/infer/predict_rec.py, TextRecognizer.resize_norm_img), transcribed."""
    img_c, img_h, img_w = image_shape
    h, w = img.shape[:2]
    ratio = w / float(h)
    resized_w = img_w if math.ceil(img_h * ratio) > img_w else int(math.ceil(img_h * ratio))
    resized = cv2.resize(img, (resized_w, img_h)).astype("float32")
    resized = resized.transpose((2, 0, 1)) / 255
    resized -= 0.5
    resized /= 0.5
    padding = np.zeros((img_c, img_h, img_w), dtype=np.float32)
    padding[:, :, 0:resized_w] = resized
    return padding


def test_keep_ratio_pad_keeps_aspect_and_pads_right_with_zero():
    x = to_input(np.full((20, 50, 3), 255, np.uint8), PPOCR)  # width ceil(48 * 50 / 20) = 120
    assert x.shape == (3, 48, 320) and x.dtype == np.float32
    np.testing.assert_allclose(x[:, :, :120], 1.0)  # (255 / 255 - 0.5) / 0.5
    assert not x[:, :, 120:].any()


def test_keep_ratio_pad_squeezes_crops_wider_than_the_input():
    x = to_input(np.zeros((10, 1000, 3), np.uint8), PPOCR)
    np.testing.assert_allclose(x, -1.0)  # no padding column: black everywhere


def test_keep_ratio_pad_equals_paddleocr_resize_norm_img_on_a_real_crop(crops):
    image = decode_jpeg(crops["car"])  # 75 x 105 px: width ceil(48 * 105 / 75) = 68
    np.testing.assert_allclose(to_input(image, PPOCR), _paddle_resize_norm_img(image), atol=1e-6)


def test_keep_ratio_pad_rgb_order():
    image = np.zeros((48, 48, 3), np.uint8)
    image[..., 2] = 255  # red in BGR
    x = to_input(image, PreprocessSpec((48, 96), "rgb", (0.0,) * 3, (1.0,) * 3, "keep_ratio_pad"))
    np.testing.assert_allclose(x[0, :, :48], 1.0)
    assert not x[1:].any() and not x[:, :, 48:].any()


def test_resize_comes_from_the_config_when_it_has_the_field():
    base = dict(input_hw=(48, 320), channel_order="bgr", mean=(0.5,) * 3, std=(0.5,) * 3)
    assert PreprocessSpec.from_config(SimpleNamespace(**base)).resize == "stretch"
    assert PreprocessSpec.from_config(SimpleNamespace(**base, resize="keep_ratio_pad")) == PPOCR
    with pytest.raises(ValueError, match="unknown resize mode"):
        to_input(np.zeros((4, 4, 3), np.uint8), PreprocessSpec.from_config(SimpleNamespace(**base, resize="crop")))


# ---------------------------------------------------------------- a micro-batch: stale, decode, resize, normalise


def test_stale_roi_is_split_off_before_compute():
    items = [roi_item("fresh", t_received_s=10.0, ttl_ms=50), roi_item("stale", t_received_s=10.0, ttl_ms=20),
             roi_item("no_deadline", t_received_s=0.0)]
    fresh, stale = split_stale(items, now_s=10.030)
    assert [i.roi.roi_id for i in fresh] == ["fresh", "no_deadline"]
    assert [i.roi.roi_id for i in stale] == ["stale"]


def test_prepare_micro_batch_keeps_rows_aligned_and_reports_decode_failures(crops):
    items = [roi_item("bike", crops["bike150"]), roi_item("bad", b"not a jpeg"), roi_item("car", crops["car"])]
    prepared = prepare_micro_batch(items, SPEC, "cpu", time.perf_counter())
    assert [i.roi.roi_id for i in prepared.items] == ["bike", "car"]
    assert [i.roi.roi_id for i in prepared.dropped["decode_error"]] == ["bad"]
    assert prepared.batch.shape == (2, 3, 32, 16) and prepared.batch.dtype == torch.float32
    assert not np.allclose(prepared.batch[0].numpy(), prepared.batch[1].numpy())


def test_prepare_micro_batch_all_failed_gives_no_batch():
    prepared = prepare_micro_batch([roi_item("bad", b"")], SPEC, "cpu", time.perf_counter())
    assert prepared.batch is None and prepared.items == [] and len(prepared.dropped["decode_error"]) == 1


def test_every_roi_is_kept_or_dropped_with_its_reason(crops):
    items = [roi_item("stale", crops["car"], t_received_s=10.0, ttl_ms=20), roi_item("bad", b"\xff\xd8 cut"),
             roi_item("bike", crops["bike150"], t_received_s=10.0), roi_item("roof", crops["roof"], t_received_s=10.0)]
    prepared = prepare_micro_batch(items, SPEC, "cpu", now_s=10.030)
    assert _ids(prepared.items) == ["bike", "roof"] and prepared.batch.shape[0] == 2
    assert {reason: _ids(dropped) for reason, dropped in prepared.dropped.items()} == {
        "stale": ["stale"], "decode_error": ["bad"]}
    assert list(prepared.dropped) == ["stale", "decode_error"] and prepared.error is None


def test_unexpected_error_drops_the_fresh_rois_as_preprocess_error_and_keeps_stale_ones_stale(crops):
    bad_mode = replace(SPEC, resize="crop")  # resize_crop raises ValueError: not a decode failure
    items = [roi_item("stale", crops["car"], t_received_s=10.0, ttl_ms=20),
             roi_item("bike", crops["bike150"], t_received_s=10.0), roi_item("bad", b"")]
    prepared = prepare_micro_batch(items, bad_mode, "cpu", now_s=10.030)
    assert prepared.batch is None and prepared.items == []
    assert {reason: _ids(dropped) for reason, dropped in prepared.dropped.items()} == {
        "stale": ["stale"], "preprocess_error": ["bike", "bad"]}
    assert isinstance(prepared.error, ValueError) and "unknown resize mode" in str(prepared.error)


@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_device_preprocessing_equals_numpy_preprocessing(crops, demo_recognizer, order):
    spec = PreprocessSpec((224, 224), order, tuple(demo_recognizer.mean), tuple(demo_recognizer.std))
    items = [roi_item(name, payload) for name, payload in crops.items()] + [roi_item("bad", b"not a jpeg")]
    expected = stack_batch([to_input(decode_jpeg(payload), spec) for payload in crops.values()])
    prepared = prepare_micro_batch(items, spec, "cpu", time.perf_counter())
    tensor = prepared.batch
    assert [i.roi.roi_id for i in prepared.items] == list(crops)
    assert [i.roi.roi_id for i in prepared.dropped["decode_error"]] == ["bad"]
    assert tensor.shape == expected.shape == (len(crops), 3, 224, 224) and tensor.dtype == torch.float32
    assert tensor.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(tensor.numpy(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "spec", [IMAGENET, PPOCR, replace(PPOCR, channel_order="rgb")], ids=["stretch", "ppocr", "rgb-pad"]
)
def test_device_batch_equals_the_host_reference_exactly(crops, spec):
    """Both paths, same crops: uint8 batch normalised by torch (padding zeroed after) == to_input per crop."""
    prepared = prepare_micro_batch([roi_item(n, p) for n, p in crops.items()], spec, "cpu", time.perf_counter())
    expected = stack_batch([to_input(decode_jpeg(payload), spec) for payload in crops.values()])
    np.testing.assert_array_equal(prepared.batch.numpy(), expected)


def test_keep_ratio_pad_pads_each_row_to_its_own_width(crops):
    """bike150 is 232 x 140 px: ceil(48 * 140 / 232) = 29 columns; car is 75 x 105 px: 68 columns."""
    items = [roi_item("bike", crops["bike150"]), roi_item("car", crops["car"])]
    batch = prepare_micro_batch(items, PPOCR, "cpu", time.perf_counter()).batch.numpy()
    assert not batch[0, :, :, 29:].any() and not batch[1, :, :, 68:].any()
    assert batch[0, :, :, 28].any() and batch[1, :, :, 67].any()


def test_keep_ratio_pad_equals_stretch_for_crops_at_least_as_wide_as_the_input(crops):
    """Input 16 x 16: car (75 x 105 px) and roof (272 x 260 px: ceil(16 * 260 / 272) = 16) fill the width, so
    keep_ratio_pad resizes them as stretch does; bike150 (232 x 140 px: 10 columns) is padded instead."""
    stretch = PreprocessSpec((16, 16), "rgb", IMAGENET.mean, IMAGENET.std)
    items = [roi_item(n, crops[n]) for n in ("car", "roof", "bike150")]
    by_stretch = prepare_micro_batch(items, stretch, "cpu", time.perf_counter()).batch
    by_pad = prepare_micro_batch(items, replace(stretch, resize="keep_ratio_pad"), "cpu", time.perf_counter()).batch
    torch.testing.assert_close(by_pad[:2], by_stretch[:2], rtol=0, atol=0)
    assert not by_pad[2, :, :, 10:].any() and by_stretch[2, :, :, 10:].any()


def test_uint8_batch_is_a_quarter_of_float32(crops, demo_recognizer):
    spec = PreprocessSpec.from_config(demo_recognizer)
    decoded, kept, undecodable = decode_crops([roi_item(n, p) for n, p in crops.items()])
    assert len(kept) == len(decoded) == len(crops)
    batch, widths_px = resize_crops(decoded, spec)
    assert batch.dtype == np.uint8 and batch.shape == (len(crops), 224, 224, 3) and not undecodable
    assert widths_px.tolist() == [224] * len(crops)
    tensor = normalise_on_device(batch, spec, "cpu")
    assert tensor.numel() * tensor.element_size() == 4 * batch.nbytes  # what a host-to-device copy saves
    empty = prepare_micro_batch([], spec, "cpu", time.perf_counter())
    assert (empty.batch, empty.items, empty.dropped) == (None, [], {})

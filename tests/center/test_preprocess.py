"""Crop decoding and normalisation into the recognizer's NCHW float32 input."""

from __future__ import annotations

import math
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

from vcascade.center.preprocess import DecodeError, PreprocessSpec, decode_jpeg, stack_batch, to_device, to_input

IMAGENET = PreprocessSpec((224, 224), "rgb", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


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

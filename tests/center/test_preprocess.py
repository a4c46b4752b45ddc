"""Crop decoding and normalisation into the recognizer's NCHW float32 input."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from center.preprocess import DecodeError, PreprocessSpec, decode_jpeg, stack_batch, to_device, to_input

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

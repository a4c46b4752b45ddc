"""Turn an ROI's JPEG payload into the recognizer's input tensor: decode, colour order, resize, normalise.

Pure functions on numpy arrays, plus :func:`to_device`, which moves a batch to a stage's device (through
pinned memory when the device is a GPU, so the host-to-device copy can overlap with other work).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import torch


class DecodeError(ValueError):
    """An ROI payload is not a decodable image. Recovery: answer the ROI with ``Drop(reason="decode_error")``."""


@dataclass(frozen=True)
class PreprocessSpec:
    """How crops become network input (from :class:`vcascade.core.config.TorchRecognizerConfig`).

    Attributes:
        input_hw: network input (height, width), px.
        channel_order: ``"rgb"`` (convert the decoded BGR crop) or ``"bgr"`` (keep it).
        mean: per-channel mean on 0..1 pixels, in the network's channel order.
        std: per-channel standard deviation on 0..1 pixels, in the network's channel order.
        resize: ``"stretch"`` (resize to ``input_hw``, aspect ratio not kept) or ``"keep_ratio_pad"`` (text
            recognition: see :func:`resize_keep_ratio_pad`).
    """

    input_hw: tuple[int, int]
    channel_order: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize: str = "stretch"

    @classmethod
    def from_config(cls, cfg) -> "PreprocessSpec":
        """Build from a recognizer config (fields of the same names; ``resize`` defaults to ``stretch``)."""
        resize = getattr(cfg, "resize", "stretch")
        return cls(tuple(cfg.input_hw), cfg.channel_order, tuple(cfg.mean), tuple(cfg.std), resize)


def decode_jpeg(payload: bytes) -> np.ndarray:
    """Decode an encoded crop with ``cv2.imdecode``.

    Args:
        payload: encoded image bytes (JPEG; any format OpenCV reads is accepted).

    Returns:
        (h, w, 3) uint8 BGR image.

    Raises:
        DecodeError: empty payload, or bytes OpenCV cannot decode.
    """
    if not payload:
        raise DecodeError("empty payload")
    image = cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None or image.size == 0:
        raise DecodeError(f"cv2.imdecode failed on {len(payload)} bytes")
    return image


def to_input(image_bgr: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """Resize and normalise one decoded crop.

    Args:
        image_bgr: (h, w, 3) uint8 BGR image.
        spec: target size, channel order, normalisation and resize mode.

    Returns:
        (3, H, W) float32 array, ``(pixel / 255 - mean) / std`` per channel, channels in ``spec.channel_order``
        (``keep_ratio_pad``: the columns right of the resized crop are 0).

    Raises:
        ValueError: unknown ``spec.resize``.
    """
    if spec.resize == "keep_ratio_pad":
        return resize_keep_ratio_pad(image_bgr, spec)
    if spec.resize != "stretch":
        raise ValueError(f"unknown resize mode {spec.resize!r}; known: stretch, keep_ratio_pad")
    return np.ascontiguousarray(_normalised_chw(resize_uint8(image_bgr, spec), spec))


def resize_uint8(image_bgr: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """``stretch`` resize of one decoded crop to ``spec.input_hw`` (``cv2.INTER_LINEAR``), channels put in the
    network's order, still uint8 (the device path normalises it there: :mod:`vcascade.center.transfer`).

    Args:
        image_bgr: (h, w, 3) uint8 BGR image.

    Returns:
        (H, W, 3) uint8 image, channels in ``spec.channel_order``.
    """
    height, width = spec.input_hw
    return _in_channel_order(cv2.resize(image_bgr, (width, height), interpolation=cv2.INTER_LINEAR), spec)


def _in_channel_order(image_bgr: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    return cv2.cvtColor(image_bgr, cv2.COLOR_BGR2RGB) if spec.channel_order == "rgb" else image_bgr


def _normalised_chw(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """(h, w, 3) uint8 -> (3, h, w) float32 view, ``(pixel / 255 - mean) / std`` per channel."""
    x = image.astype(np.float32) * np.float32(1.0 / 255.0)
    x -= np.asarray(spec.mean, dtype=np.float32)
    x /= np.asarray(spec.std, dtype=np.float32)
    return x.transpose(2, 0, 1)


def resize_keep_ratio_pad(image_bgr: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """Text-line preprocessing: resize to height H keeping the aspect ratio, normalise, right-pad with 0.

    PaddleOCR's ``resize_norm_img`` for recognition (tools/infer/predict_rec.py; rapidocr's ``TextRecognizer``
    does the same): width ``min(W, ceil(H * w / h))``, linear interpolation, ``(pixel / 255 - mean) / std``
    (0.5 / 0.5 for PP-OCR), then zeros to width W. A crop wider than H:W is squeezed to W.

    Args:
        image_bgr: (h, w, 3) uint8 BGR image, h, w >= 1.
        spec: ``input_hw`` = (H, W), channel order, mean and std.

    Returns:
        (3, H, W) float32 array.
    """
    height, width = spec.input_hw
    h, w = image_bgr.shape[:2]
    resized_w = max(1, min(width, math.ceil(height * w / h)))
    image = cv2.resize(image_bgr, (resized_w, height), interpolation=cv2.INTER_LINEAR)  # cv2 takes (w, h)
    out = np.zeros((3, height, width), dtype=np.float32)
    out[:, :, :resized_w] = _normalised_chw(_in_channel_order(image, spec), spec)
    return out


def stack_batch(inputs: list[np.ndarray]) -> np.ndarray:
    """Stack (3, H, W) float32 inputs into one (n, 3, H, W) float32 NCHW batch.

    Raises:
        ValueError: empty list or inputs of different shapes.
    """
    if not inputs:
        raise ValueError("cannot stack an empty micro-batch")
    return np.stack(inputs).astype(np.float32, copy=False)


def to_device(x: torch.Tensor | np.ndarray, device: torch.device | str) -> torch.Tensor:
    """Move a tensor (or array) to ``device``.

    CPU to CUDA goes through pinned (page-locked) host memory with ``non_blocking=True``, so the copy is
    asynchronous on the current CUDA stream and later kernels on that stream see the data. CUDA to CUDA uses
    ``non_blocking=True`` (the source stage synchronises its stream before handing the tensor on). CUDA to CPU
    is a blocking copy, because the CPU reads the data right away.
    """
    tensor = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    device = torch.device(device)
    if tensor.device == device:
        return tensor
    if device.type == "cuda":
        if tensor.device.type == "cpu":
            tensor = tensor.pin_memory()
        return tensor.to(device, non_blocking=True)
    return tensor.to(device)

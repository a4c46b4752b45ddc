"""Prepare a micro-batch: the ROIs the batcher closed become the first stage's input tensor.

:func:`prepare_micro_batch` runs these steps, in this order (the functions below follow it):

1. :func:`split_stale`: ROIs held longer than their deadline (``ttl_ms``) are dropped as ``stale`` before any
   decode or compute.
2. :func:`decode_crops`: each JPEG crop is decoded once (``cv2.imdecode``); a crop that does not decode is
   dropped as ``decode_error``.
3. :func:`resize_crop`: each crop is resized on the CPU with OpenCV to the network input, still uint8 (crops
   differ in size, so they cannot be batched before): ``stretch``, or PaddleOCR's ``keep_ratio_pad`` (text
   lines: aspect ratio kept, padded on the right).
4. :func:`resize_crops` stacks them as one (n, H, W, 3) uint8 array: 4x fewer bytes to move than float32.
5. :func:`normalise_on_device`: the array moves to the first stage's device (through pinned host memory on
   CUDA) and becomes ``(pixel / 255 - mean) / std`` there, the ``keep_ratio_pad`` padding set to 0, as an
   (n, 3, H, W) float32 tensor.

Every ROI in comes out either kept (a row of the batch) or dropped with its reason (:class:`PreparedBatch`).
:func:`to_input` is the host reference of steps 3 and 5 for one crop ((3, H, W) float32 numpy, used by tests
and baselines); the batch equals it exactly (tests/center/intake/test_preprocess.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np
import torch

from vcascade.center.intake.microbatch import RoiItem


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
            recognition: see :func:`keep_ratio_width_px`).
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


@dataclass
class PreparedBatch:
    """A prepared micro-batch: what :func:`prepare_micro_batch` kept, made of it, and dropped.

    ``len(items) + sum(len(d) for d in dropped.values())`` equals the number of ROIs given.

    Attributes:
        items: the ROIs kept; row ``i`` of ``batch`` belongs to ``items[i]``.
        batch: (n, 3, H, W) float32 torch tensor on the target device for the ``n`` kept ROIs, in the
            channels-last memory layout (a permuted NHWC buffer); None when no ROI was kept.
        dropped: reason -> the ROIs dropped for it (``stale``, ``decode_error``, ``preprocess_error``), only
            reasons with ROIs, in that order.
        error: the exception that made the ``preprocess_error`` drops (for the caller's log), else None.
    """

    items: list[RoiItem]
    batch: torch.Tensor | None
    dropped: dict[str, list[RoiItem]] = field(default_factory=dict)
    error: Exception | None = None


def prepare_micro_batch(
    items: list[RoiItem], spec: PreprocessSpec, device: str | torch.device, now_s: float
) -> PreparedBatch:
    """Steps 1 to 5 of the module docstring on one closed micro-batch; never raises.

    Args:
        items: the ROIs of the micro-batch, as the batcher closed it.
        spec: input size, channel order, normalisation and resize mode of the recognizer.
        device: where the first stage takes its input (``cpu``, ``cuda:N``).
        now_s: ``time.perf_counter()`` when the micro-batch closed (the clock of ``RoiItem.t_received_s``), s.

    Returns:
        The kept ROIs and their batch, and the dropped ROIs by reason. An unexpected error (not a
        :class:`DecodeError`) drops every ROI that was not stale as ``preprocess_error`` and is returned in
        ``error``: one bad micro-batch never stops the batcher.
    """
    fresh, stale = split_stale(items, now_s)
    dropped = {"stale": stale} if stale else {}
    try:
        crops, kept, undecodable = decode_crops(fresh)
        batch = None
        if kept:
            pixels, widths_px = resize_crops(crops, spec)
            batch = normalise_on_device(pixels, spec, device, widths_px)
    except Exception as exc:  # noqa: BLE001 - any failure is answered with a counted drop, never raised
        return PreparedBatch([], None, {**dropped, "preprocess_error": fresh}, exc)
    if undecodable:
        dropped["decode_error"] = undecodable
    return PreparedBatch(kept, batch, dropped)


def split_stale(items: list[RoiItem], now_s: float) -> tuple[list[RoiItem], list[RoiItem]]:
    """Split ROIs into ``(fresh, stale)``; stale = held longer than its ``ttl_ms`` (see ``RoiItem.is_stale``)."""
    fresh = [item for item in items if not item.is_stale(now_s)]
    stale = [item for item in items if item.is_stale(now_s)]
    return fresh, stale


def decode_crops(items: list[RoiItem]) -> tuple[list[np.ndarray], list[RoiItem], list[RoiItem]]:
    """Decode each ROI's crop once (:func:`decode_jpeg`).

    Returns:
        ``(crops, kept, undecodable)``: the (h, w, 3) uint8 BGR crops of the ROIs in ``kept`` (same order), and
        the ROIs whose crop did not decode (answer them with ``decode_error``).
    """
    crops, kept, undecodable = [], [], []
    for item in items:
        try:
            crops.append(decode_jpeg(item.payload))
        except DecodeError:
            undecodable.append(item)
            continue
        kept.append(item)
    return crops, kept, undecodable


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


def resize_crops(crops: list[np.ndarray], spec: PreprocessSpec) -> tuple[np.ndarray, np.ndarray]:
    """Resize each decoded crop (:func:`resize_crop`) and stack them.

    Args:
        crops: (h, w, 3) uint8 BGR images, at least one.

    Returns:
        ``(pixels, widths_px)``: (n, H, W, 3) uint8 array, channels in ``spec.channel_order``, and the (n,)
        int64 width of each crop's image in it, px (``W`` unless ``keep_ratio_pad`` padded the row).

    Raises:
        ValueError: no crops, or an unknown ``spec.resize``.
    """
    if not crops:
        raise ValueError("cannot stack an empty micro-batch")
    resized = [resize_crop(crop, spec) for crop in crops]
    return np.stack([pixels for pixels, _ in resized]), np.array([width for _, width in resized], np.int64)


def resize_crop(image_bgr: np.ndarray, spec: PreprocessSpec) -> tuple[np.ndarray, int]:
    """Resize one decoded crop to ``spec.input_hw`` (``cv2.INTER_LINEAR``), channels put in the network's order.

    ``stretch`` fills the (H, W) input; ``keep_ratio_pad`` resizes to (H, :func:`keep_ratio_width_px`) and pads
    the columns on its right with 0 (they become 0 after normalisation: :func:`normalise_on_device`).

    Args:
        image_bgr: (h, w, 3) uint8 BGR image, h, w >= 1.

    Returns:
        ``(pixels, width_px)``: (H, W, 3) uint8 image, channels in ``spec.channel_order``, and the width of the
        resized crop in it, px (``W`` for ``stretch``).

    Raises:
        ValueError: unknown ``spec.resize``.
    """
    height, width = spec.input_hw
    if spec.resize == "stretch":
        resized_w = width
    elif spec.resize == "keep_ratio_pad":
        resized_w = keep_ratio_width_px(image_bgr.shape[:2], spec.input_hw)
    else:
        raise ValueError(f"unknown resize mode {spec.resize!r}; known: stretch, keep_ratio_pad")
    image = cv2.resize(image_bgr, (resized_w, height), interpolation=cv2.INTER_LINEAR)  # cv2 takes (w, h)
    image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB) if spec.channel_order == "rgb" else image
    if resized_w == width:
        return image, width
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, :resized_w] = image
    return pixels, resized_w


def keep_ratio_width_px(crop_hw: tuple[int, int], input_hw: tuple[int, int]) -> int:
    """Width of a text-line crop resized to height H with its aspect ratio kept, at most W, px.

    PaddleOCR's ``resize_norm_img`` for recognition (tools/infer/predict_rec.py; rapidocr's ``TextRecognizer``
    does the same): ``min(W, ceil(H * w / h))``, so a crop wider than H:W is squeezed to W.
    """
    (h, w), (height, width) = crop_hw, input_hw
    return max(1, min(width, math.ceil(height * w / h)))


def normalise_on_device(
    pixels: np.ndarray | torch.Tensor,
    spec: PreprocessSpec,
    device: str | torch.device,
    widths_px: np.ndarray | None = None,
) -> torch.Tensor:
    """Move a uint8 crop batch to ``device`` and make it network input there.

    Args:
        pixels: (n, H, W, 3) uint8, channels in the network's order.
        spec: mean and std on 0..1 pixels (per channel, network order).
        device: the first stage's device; CPU to CUDA goes through pinned memory, ``non_blocking=True``
            (:func:`to_device`).
        widths_px: (n,) int, the width of each row's crop, px; the columns right of it are set to 0 after
            normalising (``keep_ratio_pad``). None: no padding.

    Returns:
        (n, 3, H, W) float32 tensor on ``device``, ``(pixel / 255 - mean) / std``, in the channels-last memory
        layout (the permuted NHWC buffer; the layout :class:`vcascade.center.stages.torch_stages.TorchStage` computes in).
    """
    device = torch.device(device)
    moved = to_device(pixels, device)
    mean = torch.tensor(spec.mean, dtype=torch.float32, device=device)
    std = torch.tensor(spec.std, dtype=torch.float32, device=device)
    x = moved.to(torch.float32).mul_(1.0 / 255.0).sub_(mean).div_(std)  # same op order as _normalised_chw
    width = x.shape[2]
    if widths_px is not None and (np.asarray(widths_px) < width).any():
        widths = to_device(np.asarray(widths_px, dtype=np.int64), device)
        padding = torch.arange(width, device=device)[None, :] >= widths[:, None]  # (n, W)
        x.masked_fill_(padding[:, None, :, None], 0.0)
    return x.permute(0, 3, 1, 2)


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


# ---------------------------------------------------------------- host reference (one crop, numpy)


def to_input(image_bgr: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """Resize and normalise one decoded crop on the host: :func:`resize_crop`, then normalisation in numpy.

    Args:
        image_bgr: (h, w, 3) uint8 BGR image.
        spec: target size, channel order, normalisation and resize mode.

    Returns:
        (3, H, W) float32 array, ``(pixel / 255 - mean) / std`` per channel, channels in ``spec.channel_order``
        (``keep_ratio_pad``: the columns right of the resized crop are 0).

    Raises:
        ValueError: unknown ``spec.resize``.
    """
    pixels, width_px = resize_crop(image_bgr, spec)
    x = np.ascontiguousarray(_normalised_chw(pixels, spec))
    x[:, :, width_px:] = 0.0
    return x


def _normalised_chw(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """(h, w, 3) uint8 -> (3, h, w) float32 view, ``(pixel / 255 - mean) / std`` per channel."""
    x = image.astype(np.float32) * np.float32(1.0 / 255.0)
    x -= np.asarray(spec.mean, dtype=np.float32)
    x /= np.asarray(spec.std, dtype=np.float32)
    return x.transpose(2, 0, 1)


def stack_batch(inputs: list[np.ndarray]) -> np.ndarray:
    """Stack (3, H, W) float32 inputs into one (n, 3, H, W) float32 NCHW batch.

    Raises:
        ValueError: empty list or inputs of different shapes.
    """
    if not inputs:
        raise ValueError("cannot stack an empty micro-batch")
    return np.stack(inputs).astype(np.float32, copy=False)

"""Placement of stage inputs on devices: crop batches as uint8, CUDA streams and events between stages.

Crops: decoded and resized on the CPU with OpenCV (crops differ in size, so they cannot be batched before the
resize), stacked as one (n, H, W, 3) uint8 array, moved to the first stage's device (4x fewer bytes than
float32, through pinned host memory on CUDA), then converted, normalised and permuted there with torch
(:func:`prepare_batch`). On the CPU the result equals :func:`vcascade.center.preprocess.to_input` within float rounding
(tests/center/test_transfer.py).

Between stages (:class:`Placement`): each CUDA stage computes on its own stream. Its outputs are returned as
:class:`Placed` (a tuple of tensors carrying the CUDA event recorded after the stage's kernels); the next stage
makes its own stream wait on that event (``Stream.wait_event``: a device-side dependency, not a host-side
device synchronize) and marks the inputs with ``Tensor.record_stream`` so the caching allocator does not reuse
their memory while its stream still reads them. On the CPU every step is a no-op and plain tuples flow.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from vcascade.center.microbatch import RoiItem
from vcascade.center.preprocess import DecodeError, PreprocessSpec, decode_jpeg, resize_uint8, to_device


class Placed(tuple):
    """A stage's output tensors plus ``ready``: the CUDA event after which they are complete (None on CPU)."""

    ready: torch.cuda.Event | None = None

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor], ready: "torch.cuda.Event | None") -> "Placed":
        """Wrap ``tensors`` with their ready event."""
        placed = cls(tensors)
        placed.ready = ready
        return placed


def decode_items_uint8(
    items: list[RoiItem], spec: PreprocessSpec
) -> tuple[np.ndarray | None, list[RoiItem], list[RoiItem]]:
    """Decode and resize each ROI's crop on the CPU, keeping rows aligned with items.

    Returns:
        ``(batch, ok, failed)``: (n, H, W, 3) uint8 array for the ``n`` ROIs in ``ok`` (None when n == 0), and
        the ROIs whose crop did not decode (answer them with ``decode_error``).
    """
    images, ok, failed = [], [], []
    for item in items:
        try:
            images.append(resize_uint8(decode_jpeg(item.payload), spec))
        except DecodeError:
            failed.append(item)
            continue
        ok.append(item)
    return (np.stack(images) if images else None), ok, failed


def normalise_on_device(batch_u8: np.ndarray | torch.Tensor, spec: PreprocessSpec, device: str | torch.device) -> torch.Tensor:
    """Move a uint8 crop batch to ``device`` and make it network input there.

    Args:
        batch_u8: (n, H, W, 3) uint8, channels in the network's order.
        spec: mean and std on 0..1 pixels (per channel, network order).
        device: the first stage's device; CPU to CUDA goes through pinned memory, ``non_blocking=True``.

    Returns:
        (n, 3, H, W) float32 tensor on ``device``, ``(pixel / 255 - mean) / std``, in the channels-last memory
        layout (the permuted NHWC buffer; the layout :class:`vcascade.center.recognizer.TorchStage` computes in).
    """
    device = torch.device(device)
    pixels = to_device(batch_u8, device)
    mean = torch.tensor(spec.mean, dtype=torch.float32, device=device)
    std = torch.tensor(spec.std, dtype=torch.float32, device=device)
    x = pixels.to(torch.float32).mul_(1.0 / 255.0).sub_(mean).div_(std)  # same op order as to_input
    return x.permute(0, 3, 1, 2)


def prepare_batch(
    items: list[RoiItem], spec: PreprocessSpec, device: str | torch.device
) -> tuple[torch.Tensor | None, list[RoiItem], list[RoiItem]]:
    """Crops of ``items`` -> input tensor on ``device``: :func:`decode_items_uint8` then :func:`normalise_on_device`.

    Returns:
        ``(tensor, ok, failed)``: (n, 3, H, W) float32 for the ROIs in ``ok`` (None when none decoded) and the
        ROIs whose crop did not decode.
    """
    batch, ok, failed = decode_items_uint8(items, spec)
    return (normalise_on_device(batch, spec, device) if batch is not None else None), ok, failed


class Placement:
    """Where one stage computes: its device and, on CUDA, its own stream.

    Args:
        device: ``cpu`` or ``cuda:N``.
        sync_host: CUDA only: the stage's thread waits for its own event before returning, so stage timestamps
            measure compute (the other stages' streams keep running; no device-wide synchronize).
    """

    def __init__(self, device: str | torch.device, sync_host: bool = True) -> None:
        self.device = torch.device(device)
        self.sync_host = sync_host
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def run(self, module: nn.Module, inputs: Sequence[torch.Tensor], layout: Callable[[torch.Tensor], torch.Tensor]) -> tuple:
        """Run ``module`` on ``inputs`` (tensors on any device, possibly :class:`Placed`) on this device.

        Args:
            layout: applied to each input once it is on this device (e.g. to channels-last).

        Returns:
            A plain tuple of output tensors on the CPU; a :class:`Placed` on CUDA.
        """
        if self.stream is None:
            _wait_on_host(inputs)
            with torch.inference_mode():
                return _as_tuple(module(*[layout(to_device(x, self.device)) for x in inputs]))
        with torch.cuda.stream(self.stream), torch.inference_mode():
            self._wait_for(inputs)
            moved = [layout(to_device(x, self.device)) for x in inputs]
            outputs = _as_tuple(module(*moved))
            ready = torch.cuda.Event()
            ready.record(self.stream)
        if self.sync_host:
            ready.synchronize()
        return Placed.of(outputs, ready)

    def _wait_for(self, inputs: Sequence[torch.Tensor]) -> None:
        """Make this stage's stream wait for the producer; keep the inputs' memory alive for it.

        A :class:`Placed` input: wait on its event. A plain CUDA tensor (the batcher's input, made on the
        default stream): wait for the work queued so far on that device's default stream.
        """
        ready = getattr(inputs, "ready", None)
        sources = {x.device for x in inputs if x.device.type == "cuda"}
        if ready is not None:
            self.stream.wait_event(ready)
            for source in sources - {self.device}:
                torch.cuda.current_stream(source).wait_event(ready)  # a peer copy runs on the source's stream
        else:
            for source in sources:
                self.stream.wait_stream(torch.cuda.default_stream(source))
        for x in inputs:
            if x.device.type == "cuda":
                x.record_stream(self.stream)


def _wait_on_host(inputs: Sequence[torch.Tensor]) -> None:
    """CPU consumer of CUDA outputs: block until the producer's event (the copy to the CPU then sees them)."""
    ready = getattr(inputs, "ready", None)
    if ready is not None:
        ready.synchronize()


def _as_tuple(output) -> tuple:
    return (output,) if isinstance(output, torch.Tensor) else tuple(output)

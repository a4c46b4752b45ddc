"""Placement of pipeline stages on devices: CUDA streams and events between stages.

The first stage's input is made by :mod:`vcascade.center.intake.preprocess` (a uint8 crop batch normalised on the
first stage's device).

Between stages (:class:`Placement`): each CUDA stage computes on its own stream. Its outputs are returned as
:class:`Placed` (a tuple of tensors carrying the CUDA event recorded after the stage's kernels); the next stage
makes its own stream wait on that event (``Stream.wait_event``: a device-side dependency, not a host-side
device synchronize) and marks the inputs with ``Tensor.record_stream`` so the caching allocator does not reuse
their memory while its stream still reads them. On the CPU every step is a no-op and plain tuples flow.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from vcascade.center.intake.preprocess import to_device


class Placed(tuple):
    """A stage's output tensors plus ``ready``: the CUDA event after which they are complete (None on CPU)."""

    ready: torch.cuda.Event | None = None

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor], ready: "torch.cuda.Event | None") -> "Placed":
        """Wrap ``tensors`` with their ready event."""
        placed = cls(tensors)
        placed.ready = ready
        return placed


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

"""Run a recognizer's pipeline stages one after the other in the test's thread (no engine, no queues): the
reference the stage engine, the stage groups and the transfers are compared with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def run_chained(stages: Sequence[Callable[[tuple], tuple]], x: Any) -> Any:
    """Feed ``(x,)`` to the first stage and each stage's output tuple to the next; the last stage's first output
    (a torch tensor for torch stages, a numpy array for ONNX stages)."""
    activations: tuple = (x,)
    for stage in stages:
        activations = stage(activations)
    return activations[0]

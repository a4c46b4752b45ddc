"""The ``calibrated`` stage runtime: no model, one stage that takes the measured time of each micro-batch.

Capacity planning and the scale harness (``tools/bench_scale.py``) need workers that behave like the real
recognizer (same sockets, batcher, crop decoding, stage engine, head, answers) without spending a CPU core
on the model: the stage holds each micro-batch for the service time measured from the real model at that
micro-batch size, and sleeps meanwhile, like a worker thread waiting for its GPU. So one machine can run
many such workers, and a worker's capacity is known in advance::

    capacity_rois_per_s = B / service_s(B)      (B: the micro-batch size it forms under load, its max_batch)

``service_ms`` (``recognizers.<name>.service_ms``) maps micro-batch sizes to milliseconds; how it was measured
(the real model on this host's CPU, or ``tools/gpu_center.py`` on a GPU) is in docs/DEPLOY.md, "Capacity
planning".
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping

import numpy as np


def service_time_ms(table: Mapping[int, float], batch: int) -> float:
    """Service time of a micro-batch of ``batch`` ROIs from measured points, ms.

    Linear interpolation between the two measured sizes around ``batch``; below the smallest size, that size's
    time (a micro-batch never costs less than the fixed part); above the largest, the last segment's per-ROI
    slope continued (one point only: proportional to the batch).

    Args:
        table: micro-batch size (>= 1) -> ms, at least one entry.
        batch: micro-batch size, >= 1.

    Raises:
        ValueError: an empty table or ``batch`` < 1.
    """
    if not table or batch < 1:
        raise ValueError(f"need a non-empty table and batch >= 1, got {dict(table)} and {batch}")
    sizes = sorted(table)
    if batch in table:
        return float(table[batch])
    if batch < sizes[0]:
        return float(table[sizes[0]])
    index = bisect.bisect_left(sizes, batch)
    if index == len(sizes):  # beyond the largest measured size
        if len(sizes) == 1:
            return float(table[sizes[0]]) * batch / sizes[0]
        low, high = sizes[-2], sizes[-1]
    else:
        low, high = sizes[index - 1], sizes[index]
    slope_ms = (table[high] - table[low]) / (high - low)
    return float(table[low] + slope_ms * (batch - low))


class CalibratedStage:
    """A pipeline stage that waits the calibrated service time of each micro-batch and returns a cheap output.

    Args:
        service_ms: micro-batch size -> ms (:func:`service_time_ms`).
        output_dim: width of the output.
        sleep: how the time passes (``time.sleep``; a stage thread waiting for its device).

    Call with the activations tuple whose first element is the (N, 3, H, W) float32 micro-batch; returns
    ``((N, output_dim) float32,)``: the first ``output_dim`` values of each crop's tensor (zero-padded), so
    the head sees a deterministic function of the crop.
    """

    def __init__(self, service_ms: Mapping[int, float], output_dim: int, sleep=time.sleep) -> None:
        self.service_ms = dict(service_ms)
        self.output_dim = output_dim
        self._sleep = sleep

    def __call__(self, activations: tuple) -> tuple:
        x = np.asarray(activations[0])
        n = x.shape[0]
        self._sleep(service_time_ms(self.service_ms, n) / 1000.0)
        flat = x.reshape(n, -1)[:, : self.output_dim].astype(np.float32, copy=False)
        if flat.shape[1] < self.output_dim:
            flat = np.pad(flat, ((0, 0), (0, self.output_dim - flat.shape[1])))
        return (flat,)


def build_calibrated_stages(cfg, devices) -> list[CalibratedStage]:
    """One :class:`CalibratedStage` for a ``calibrated`` recognizer config (one device).

    Raises:
        ValueError: other than one device.
    """
    if len(devices) != 1:
        raise ValueError(f"a calibrated recognizer runs as one stage on one device, got devices {list(devices)}")
    return [CalibratedStage(cfg.service_ms, cfg.output_dim)]

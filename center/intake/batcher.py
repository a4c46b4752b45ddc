"""Micro-batcher: group received ROIs into micro-batches on "full or timeout".

A micro-batch closes when it holds ``max_batch`` ROIs, or ``max_wait_ms`` after its first ROI was received,
whichever comes first (the policy of DeepStream's stream muxer: ``batch-size`` / ``batched-push-timeout``).
ROIs already waiting when the timeout expires are still taken, up to ``max_batch``, so a backlog is cleared
in full batches. What happens to a closed micro-batch before compute (stale ROIs, crop decode, resize,
normalisation) is :mod:`vcascade.center.intake.preprocess`.
"""

from __future__ import annotations

import queue
import time
from typing import Callable

from vcascade.center.intake.microbatch import RoiItem

STOP = object()
"""Put this in the batcher's inbox to make :meth:`MicroBatcher.collect` close its batch and report the stop."""


class MicroBatcher:
    """Collect :class:`RoiItem` s from a queue into micro-batches.

    Args:
        max_batch: ROIs per micro-batch at most (>= 1).
        max_wait_ms: how long a partial micro-batch waits for more ROIs after its first ROI's receive time, ms.
        clock: the clock of ``RoiItem.t_received_s``, seconds (``time.perf_counter``).

    Raises:
        ValueError: ``max_batch < 1`` or ``max_wait_ms < 0``.
    """

    def __init__(self, max_batch: int, max_wait_ms: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch >= 1 and max_wait_ms >= 0, got {max_batch}, {max_wait_ms}")
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._clock = clock

    def collect(self, inbox: queue.Queue, idle_timeout_s: float) -> tuple[list[RoiItem], bool]:
        """Block for the first ROI (at most ``idle_timeout_s``), then fill the micro-batch until full or timeout.

        Returns:
            ``(items, stopped)``: the closed micro-batch (empty when nothing arrived in ``idle_timeout_s``) and
            whether :data:`STOP` was taken from the inbox (the items before it are still returned).
        """
        try:
            first = inbox.get(timeout=idle_timeout_s)
        except queue.Empty:
            return [], False
        if first is STOP:
            return [], True
        items = [first]
        deadline = first.t_received_s + self.max_wait_s
        while len(items) < self.max_batch:
            item = self._next(inbox, deadline - self._clock())
            if item is None:
                break
            if item is STOP:
                return items, True
            items.append(item)
        return items, False

    @staticmethod
    def _next(inbox: queue.Queue, wait_s: float):
        try:
            return inbox.get(timeout=wait_s) if wait_s > 0 else inbox.get_nowait()
        except queue.Empty:
            return None


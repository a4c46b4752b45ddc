"""Waiting in tests for real state that announces no change (a sink's counts, a connection flag)."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def until(predicate: Callable[[], bool], timeout_s: float = 30.0, poll_s: float = POLL_S) -> bool:
    """Poll ``predicate()`` every ``poll_s`` until it holds (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True

"""Reconnect delays: capped exponential backoff with full jitter.

Source of the formula: Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog (2015),
https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/ — "Full Jitter":
``sleep = random_between(0, min(cap, base * 2 ** attempt))``. Full jitter spreads the reconnects of many
cameras that lost the same server, so they do not all knock at once when it comes back.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays for successive reconnect attempts of one camera.

    Args:
        initial_s: ``base``: the cap of the first delay, s (> 0).
        max_s: ``cap``: the largest cap any delay can have, s (>= initial_s is sensible; smaller just caps sooner).
        rng: random source (a seeded ``random.Random`` makes delays reproducible).

    Raises:
        ValueError: ``initial_s`` or ``max_s`` is not positive.
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s <= 0:
            raise ValueError(f"backoff delays must be positive, got initial_s={initial_s}, max_s={max_s}")
        self.initial_s, self.max_s = initial_s, max_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def cap_s(self) -> float:
        """The upper bound of the next delay, s: ``min(max_s, initial_s * 2 ** attempt)``."""
        return min(self.max_s, self.initial_s * 2.0 ** min(self.attempt, 62))

    def next_delay_s(self) -> float:
        """The delay before the next attempt, s, uniform in ``[0, cap_s()]``; counts one attempt."""
        delay_s = self._rng.uniform(0.0, self.cap_s())
        self.attempt += 1
        return delay_s

    def reset(self) -> None:
        """A connection worked (frames arrived): the next failure starts again from ``initial_s``."""
        self.attempt = 0

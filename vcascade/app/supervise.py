"""Restart policy of supervised component processes: backoff between restarts and a restart-storm limit.

Frigate's watchdog pattern (docs/DESIGN.md, "Code shape"): a process that exits unexpectedly is started again
after a capped exponential backoff; when it has already been restarted ``max_restarts`` times within the last
``window_s`` seconds it is in a restart storm, and the supervisor stops restarting it and reports it instead
of hiding a crash loop. The policy is pure (it is given the time, it starts nothing), so it is tested without
processes; :mod:`vcascade.app.launcher` applies it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    """Limits of one component's restarts.

    Attributes:
        max_restarts: restarts allowed within ``window_s``; the next unexpected exit gives up (>= 0).
        window_s: sliding window of the storm limit, seconds (> 0).
        backoff_initial_s: delay before the first restart of a quiet window, seconds (>= 0).
        backoff_max_s: largest delay, seconds; each restart within the window doubles the delay up to it.
    """

    max_restarts: int = 5
    window_s: float = 60.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.window_s <= 0 or self.backoff_initial_s < 0:
            raise ValueError(f"invalid restart policy {self}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s {self.backoff_max_s} < backoff_initial_s {self.backoff_initial_s}")


class RestartTracker:
    """The restart history of one component under a :class:`RestartPolicy`.

    Call :meth:`on_exit` when the process exited unexpectedly; it answers how long to wait before starting it
    again, or ``None`` when the storm limit is reached (the component then stays stopped: :attr:`gave_up`).
    """

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.restarts = 0
        """Restarts granted so far (whole run)."""
        self.gave_up = False
        self._recent_s: deque[float] = deque()

    def on_exit(self, now_s: float) -> float | None:
        """Record an unexpected exit at monotonic time ``now_s`` (seconds).

        Returns:
            Seconds to wait before the restart: ``backoff_initial_s * 2**k`` capped at ``backoff_max_s``, where
            ``k`` is the number of restarts already granted within the window; or ``None`` once
            ``max_restarts`` restarts fall within the last ``window_s`` seconds (restart storm: give up).
        """
        if self.gave_up:
            return None
        while self._recent_s and now_s - self._recent_s[0] >= self.policy.window_s:
            self._recent_s.popleft()
        if len(self._recent_s) >= self.policy.max_restarts:
            self.gave_up = True
            return None
        delay_s = min(self.policy.backoff_max_s, self.policy.backoff_initial_s * 2 ** len(self._recent_s))
        self._recent_s.append(now_s)
        self.restarts += 1
        return delay_s

"""What the broker's dispatch policy keeps per registered worker, and which worker is the least useful. Pure.

:class:`vcascade.broker.dispatch.Dispatcher` owns one :class:`WorkerState` per worker. Besides the credits and
the ROIs in flight it counts what the worker did with its ROIs: ``answered`` (Results and Drops, late ones
included) and ``overdue`` (ROIs taken back because they were not answered within the answer deadline since its
last answer). Overdue ROIs cost the worker their credits until it answers again, so a worker that takes ROIs
and never answers (a fake, or a hung process that still heartbeats) ends with no credit and gets no more ROIs;
and it is the first to give its registration up to a new worker (:meth:`WorkerState.eviction_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class WorkerLimit(RuntimeError):
    """A new worker would exceed ``max_workers`` while every registered worker is useful (has answered and
    owes nothing). Recovery: ignore its Ready and count it as bad input."""


class RecognizerChanged(RuntimeError):
    """A registered worker announced another recognizer than at registration. Recovery: ignore that Ready and
    count it; the worker keeps its first recognizer (a worker process runs one model for its lifetime)."""


@dataclass(slots=True)
class WorkerState:
    """One registered worker.

    Attributes:
        credits: ROIs it may hold in flight, from its last Ready.
        recognizer: the recognizer it announced at registration (``""``: ROIs for any worker only).
        last_used: the dispatch counter value of its last assignment; 0 = never used (least recent).
        in_flight: ids of the ROIs it holds.
        answered: ROIs it answered (Result or Drop), late answers included.
        overdue: ROIs taken back from it on the answer deadline since its last answer; each costs one credit.
        start_delay_s: its last announced wait before a new micro-batch starts compute, s (``Ready.start_delay_ms``).
    """

    credits: int
    recognizer: str = ""
    last_used: int = 0
    in_flight: set[str] = field(default_factory=set)
    answered: int = 0
    overdue: int = 0
    start_delay_s: float = 0.0

    def load(self) -> float:
        """ROIs held per credit announced (call only while it has credit: ``credits > 0``)."""
        return len(self.in_flight) / self.credits

    def has_credit(self) -> bool:
        """True when it may take one more ROI: fewer in flight than its credits less its overdue ROIs."""
        return len(self.in_flight) < self.credits - self.overdue

    def serves(self, recognizer: str) -> bool:
        """An ROI for ``recognizer`` may go to this worker: the same recognizer, or an ROI for any."""
        return not recognizer or recognizer == self.recognizer

    def answer(self) -> None:
        """It answered an ROI (in time or late): its overdue ROIs' credits are back."""
        self.answered += 1
        self.overdue = 0

    def evictable(self) -> bool:
        """True when it may give its registration up to a new worker: it never answered, or it owes answers."""
        return self.answered == 0 or self.overdue > 0

    def eviction_rank(self, last_heard_s: float) -> tuple[bool, int, float]:
        """Sort key of evictable workers, least useful first: owing answers before not owing, then fewer answers,
        then least recently heard (``last_heard_s``, seconds on the dispatcher's clock)."""
        return (self.overdue == 0, self.answered, last_heard_s)

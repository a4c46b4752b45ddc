"""The stop signal every component's run loop watches."""

from __future__ import annotations

from typing import Protocol


class StopFlag(Protocol):
    """A component's stop signal: ``threading.Event`` (one component in the CLI's process) or
    ``multiprocessing.Event`` (a child of the launcher). Run loops poll ``is_set`` or block in ``wait``."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...

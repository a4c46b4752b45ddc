"""Liveness and readiness of one process, served as ``/healthz`` and ``/readyz`` on its metrics port.

``/healthz`` answers 200 while the process runs (the HTTP thread answering is the proof). ``/readyz`` answers 200
only when every registered readiness check passes ("connected and serving"), else 503 with the failing checks'
reasons. Components register checks on the process-wide :data:`READINESS` (several components may share a
process in tests, so check names carry the component name):

* edge ``<edge>``: ``brokers`` — at least one broker link alive; ``cameras`` — at least one camera streaming
  or a file camera not yet ended;
* broker ``<broker>``: ``bound`` — frontend and backend sockets bound; ``workers`` — at least one worker
  registered;
* worker ``<worker>``: ``stages`` — the recognizer's stages loaded; ``brokers`` — at least one broker heard
  within the heartbeat liveness window.

A check is a callable evaluated at request time on the HTTP thread; it must only read plain attributes (no
locks held for long, no I/O). A check that raises counts as failing with the exception's text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Check = Callable[[], tuple[bool, str]]
"""A readiness check: returns ``(ok, reason)``; ``reason`` says what is missing when ``ok`` is False."""


class Readiness:
    """Named readiness checks of one process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {}

    def add_check(self, name: str, check: Check) -> None:
        """Register (or replace) check ``name``, e.g. ``"broker:broker-1:workers"``."""
        with self._lock:
            self._checks[name] = check

    def set(self, name: str, ok: bool, reason: str = "") -> None:
        """Register a fixed outcome for ``name`` (for facts that change once, like "sockets bound")."""
        self.add_check(name, lambda: (ok, reason))

    def remove(self, prefix: str) -> None:
        """Drop every check whose name starts with ``prefix`` (a component that stopped)."""
        with self._lock:
            for name in [n for n in self._checks if n.startswith(prefix)]:
                del self._checks[name]

    def evaluate(self) -> tuple[bool, dict[str, str]]:
        """``(ready, failing)``: ready when at least one check is registered and all pass; ``failing`` maps each
        failing check's name to its reason (``"no readiness check registered"`` under ``"process"`` if none)."""
        with self._lock:
            checks = dict(self._checks)
        if not checks:
            return False, {"process": "no readiness check registered (still starting)"}
        failing = {}
        for name, check in checks.items():
            try:
                ok, reason = check()
            except Exception as exc:  # a check must never take the endpoint down
                ok, reason = False, f"check raised {type(exc).__name__}: {exc}"
            if not ok:
                failing[name] = reason
        return not failing, failing


READINESS = Readiness()
"""The readiness checks of this process, read by :mod:`vcascade.core.telemetry.metrics`'s ``/readyz``."""

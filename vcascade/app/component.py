"""One supervised component process of a deployment (a broker, a worker, an edge) as :mod:`vcascade.app.launcher`
keeps it: its current process and report pipe, its restart history (:mod:`vcascade.app.supervise` decides the
delays) and the runs it has ended, each with its last report.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from typing import Any

from vcascade.app.commands import EXIT_NO_RESTART
from vcascade.app.supervise import RestartPolicy, RestartTracker


class Component:
    """One supervised component: its current process and report pipe, its restart history and past runs.

    ``history`` holds one entry per ended run: ``{"pid", "exit_code", "ended_unix_s", "snapshot"}`` (the
    run's last snapshot; ``final`` in it when the run ended on its own).
    """

    def __init__(self, kind: str, name: str, stop: Any, policy: RestartPolicy) -> None:
        self.kind, self.name, self.stop = kind, name, stop
        self.tracker = RestartTracker(policy)
        self.proc: Any = None
        self.conn: Connection | None = None
        self.snapshot: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.restart_at_s: float | None = None
        self.finished = False
        """True once it exited on purpose (edge done, or stopped) or was given up: never restarted."""
        self.start_failed = False
        """True once a run exited with EXIT_NO_RESTART (a deterministic start-up error): never restarted."""
        self._run_snapshot: dict[str, Any] | None = None
        self.killed_at_stop = 0
        """Runs killed because they overstayed the stop grace (:data:`vcascade.app.launcher.GRACE_KEY`)."""

    def started(self, proc: Any, conn: Connection) -> None:
        self.proc, self.conn, self.restart_at_s, self._run_snapshot = proc, conn, None, None

    def receive(self) -> None:
        """Read one report from the pipe; EOF or a corrupt message (a child killed mid-write) closes it."""
        assert self.conn is not None
        try:
            snap = self.conn.recv()
        except Exception:  # EOFError, OSError, or unpickling a torn message: this run reports no more
            self.conn.close()
            self.conn = None
            return
        if isinstance(snap, dict) and str(snap.get("component", "")).replace("_", "-") == self.kind:  # stage_group
            self.snapshot = self._run_snapshot = snap

    def drain_reports(self) -> None:
        """Read what an exited run still had in its pipe (its final report)."""
        while self.conn is not None and self.conn.poll(0):
            self.receive()

    def exited(self) -> bool:
        """True once per ended run, when its process is gone and the exit is not yet recorded."""
        return self.proc is not None and not self.proc.is_alive() and self.restart_at_s is None and not self.finished \
            and (not self.history or self.history[-1]["pid"] != self.proc.pid)

    def on_exit(self, now_s: float) -> float | None:
        """Record the ended run; returns the restart delay (s), or None when it is not restarted."""
        code = self.proc.exitcode
        self.history.append({"pid": self.proc.pid, "exit_code": code, "ended_unix_s": time.time(),
                             "snapshot": self._run_snapshot})  # fmt: skip
        if self.stop.is_set() or (self.kind == "edge" and code == 0):
            self.finished = True
            return None
        if code == EXIT_NO_RESTART:  # a deterministic start-up error: the same start would fail the same way
            self.finished = self.start_failed = True
            return None
        delay_s = self.tracker.on_exit(now_s)
        if delay_s is None:
            self.finished = True
            return None
        self.restart_at_s = now_s + delay_s
        return delay_s

    def restart_due(self, now_s: float) -> bool:
        """True when a scheduled restart's delay has passed (a stop cancels it: the component is finished)."""
        if self.restart_at_s is None:
            return False
        if self.stop.is_set():
            self.restart_at_s, self.finished = None, True
            return False
        return now_s >= self.restart_at_s

    def status(self) -> dict[str, Any]:
        alive = self.proc is not None and self.proc.is_alive()
        return {
            "kind": self.kind, "name": self.name, "pid": self.proc.pid if self.proc else None, "alive": alive,
            "restarts": self.tracker.restarts, "gave_up": self.tracker.gave_up, "finished": self.finished,
            "exit_codes": [run["exit_code"] for run in self.history], "killed_at_stop": self.killed_at_stop,
        }

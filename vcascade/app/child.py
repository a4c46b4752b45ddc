"""A launcher child process: its entry point and its report pipe (vcascade.app.launcher starts them)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

from vcascade.app.commands import EXIT_FAILURE, EXIT_NO_RESTART
from vcascade.app.components import run_component
from vcascade.app.parent_death import die_with_parent, stop_on_sigterm_when_orphaned
from vcascade.app.process_exit import exit_now
from vcascade.core.config import ConfigError
from vcascade.core.telemetry.logs import configure_logging
from vcascade.core.runtime.startup import StartupError

log = logging.getLogger(__name__)


def child_main(
    kind: str, config_path: str, name: str, model_dir: str | None, stop: Any, conn: Any, log_level: str,
    launcher_pid: int,
) -> None:  # fmt: skip
    """Process entry point of one component: runs it until ``stop`` is set, reporting snapshots on ``conn``.

    Exit codes: 0, EXIT_FAILURE after an error (the launcher restarts the component), EXIT_NO_RESTART after a
    :class:`vcascade.core.runtime.startup.StartupError` (a missing or invalid model) or a ConfigError (the file changed since
    the launcher read it and is now invalid): the same start would fail the same way.

    SIGINT is ignored, and SIGTERM while the launcher ``launcher_pid`` lives (the launcher coordinates both);
    the process gets SIGTERM when the launcher dies and then sets ``stop`` and drains
    (:mod:`vcascade.app.parent_death`). A launcher already gone when the child starts: the child exits with
    EXIT_FAILURE without starting its component.

    ``spawn`` imports this module in the child, so it stays light: the component's own modules are imported by
    :func:`vcascade.app.components.run_component`, the launcher's (ONNX Runtime for the model check, rich)
    never are.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(log_level, kind, name)  # format from $VCASCADE_LOG_FORMAT (set by the CLI)
    stop_on_sigterm_when_orphaned(launcher_pid, stop)
    if not die_with_parent(launcher_pid):
        log.error("%s %s: the launcher (pid %d) exited before this process started; not starting", kind, name,
                  launcher_pid)  # fmt: skip
        exit_now(kind, EXIT_FAILURE, conn)
    report = _pipe_reporter(conn)
    code = 0
    try:
        run_component(kind, config_path, name, stop, report, model_dir)
    except (StartupError, ConfigError) as exc:  # deterministic: one line, no traceback, and no restart
        log.error("%s %s cannot start: %s", kind, name, exc)
        report({"component": kind, "name": name, "final": True, "error": f"{type(exc).__name__}: {exc}"})
        code = EXIT_NO_RESTART
    except Exception as exc:
        logging.getLogger(kind).exception("%s %s failed", kind, name)
        report({"component": kind, "name": name, "final": True, "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    exit_now(kind, code, conn)


def _pipe_reporter(conn: Connection) -> Any:
    """``report(snapshot)`` for a child: sends the snapshot (with the child's pid) on its pipe, thread-safe.

    A launcher that went away (broken pipe) is logged once; the component keeps serving.
    """
    lock, broken = threading.Lock(), []

    def report(snapshot: dict[str, Any]) -> None:
        if broken:
            return
        with lock:
            try:
                conn.send({**snapshot, "pid": os.getpid()})
            except (OSError, ValueError) as exc:
                broken.append(exc)
                log.warning("cannot report to the launcher any more: %s", exc)

    return report

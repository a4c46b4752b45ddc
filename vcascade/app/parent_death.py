"""A launcher's child process dies with its launcher: no component outlives a SIGKILLed ``vcascade run``.

At start each child asks Linux for a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``, prctl(2)): when
the launcher exits for any reason, SIGKILL included, the kernel sends the child SIGTERM. The request only holds
for a parent that is still there, so the child then checks that its parent is still the launcher (the launcher
may have died between the spawn and the request: the child was re-parented already and no signal will come).

A child's SIGTERM handler (:func:`stop_on_sigterm_when_orphaned`) tells the two senders apart by the parent: while
the launcher lives, the launcher coordinates every stop (it catches SIGINT and SIGTERM; a terminal, systemd or
``kill -- -PGID`` send them to the whole process group), so the child ignores the signal as it ignores SIGINT;
once the launcher is gone, the signal sets the component's stop flag and the component drains as on a
launcher's stop (an edge waits up to ``drain_timeout_s`` for its in-flight ROIs, flushes its sinks, exits).

The kernel sends the signal when the *thread* that spawned the child exits, not the process: the launcher
spawns (and restarts) every child from its main thread. Other platforms have no such signal: nothing is set
there, and one log line says so.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent exits (<linux/prctl.h>)."""


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``sig`` to this process when its parent exits; True while the parent is ``parent_pid``.

    Args:
        parent_pid: the pid of the process that started this one (the launcher), as it knew itself.
        sig: the signal to receive when the parent exits.

    Returns:
        False when this process's parent is no longer ``parent_pid``: the parent died before the request (the
        kernel will never send the signal), and the caller should exit instead of starting its work.

    Raises:
        OSError: prctl refused the request (its errno).
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(int(sig)), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # fmt: skip
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    else:
        log.info("no parent-death signal on %s: this process may outlive a killed launcher", sys.platform)
    return os.getppid() == parent_pid


def stop_on_sigterm_when_orphaned(parent_pid: int, stop: Any) -> None:
    """Install this process's SIGTERM handler: ignored while ``parent_pid`` is its parent, ``stop.set()`` after.

    Call it from the main thread (Python's rule for signal handlers), before :func:`die_with_parent`, so that a
    parent dying right after the request finds the handler in place.

    Args:
        parent_pid: the launcher's pid.
        stop: the component's stop flag (``multiprocessing.Event`` or ``threading.Event``). It is set from a
            short-lived thread: the handler runs in the main thread, which may hold the flag's lock right then.
    """

    def on_sigterm(signum: int, frame: Any) -> None:
        if os.getppid() != parent_pid:
            threading.Thread(target=_stop_orphan, args=(parent_pid, stop), name="orphan-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)


def _stop_orphan(parent_pid: int, stop: Any) -> None:
    log.warning("the launcher (pid %d) is gone: stopping and draining", parent_pid)
    stop.set()

"""A launcher's child dies with its launcher (vcascade/app/parent_death.py), on real processes: a parent that
starts a child, the child asking for the parent-death signal, the parent SIGKILLed.

The child below reports on stdout: whether its parent was still the one that started it after the request,
then, for each line on stdin, whether its stop flag is set; once the flag is set it says so and exits.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

CHILD = """
import os, select, sys, threading
from vcascade.app.parent_death import die_with_parent, stop_on_sigterm_when_orphaned
parent, stop = int(sys.argv[1]), threading.Event()
stop_on_sigterm_when_orphaned(parent, stop)
print("parent kept", die_with_parent(parent), flush=True)
while not stop.is_set():
    if select.select([sys.stdin], [], [], 0.05)[0]:
        sys.stdin.readline()
        print("stop set", stop.is_set(), flush=True)
print("stopped, parent gone", os.getppid() != parent, flush=True)
"""

PARENT = """
import os, signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())])
print(child.pid, flush=True)
signal.pause()
"""

REPLY_TIMEOUT_S = 30.0
"""Bound on each answer of the child (a Python start-up on a loaded machine)."""


def _line(stream) -> str:
    """The next line of the unbuffered pipe ``stream``, waiting at most REPLY_TIMEOUT_S."""
    ready, _, _ = select.select([stream], [], [], REPLY_TIMEOUT_S)
    assert ready, f"no line within {REPLY_TIMEOUT_S} s"
    return stream.readline().decode().strip()  # unbuffered: reads up to the newline, never past it


def test_a_child_ignores_sigterm_while_its_parent_lives_and_drains_when_the_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              bufsize=0)  # fmt: skip
    child_pid = None
    try:
        first = sorted([_line(parent.stdout), _line(parent.stdout)])  # the parent's and the child's, any order
        child_pid = int(first[0])
        assert first[1] == "parent kept True"
        os.kill(child_pid, signal.SIGTERM)  # the launcher coordinates stops while it lives: nothing happens
        parent.stdin.write(b"?\n")
        assert _line(parent.stdout) == "stop set False"  # alive (a default SIGTERM would have ended it)

        parent.kill()  # SIGKILL: no chance to stop its child; the kernel sends the child SIGTERM
        parent.wait(timeout=REPLY_TIMEOUT_S)
        assert _line(parent.stdout) == "stopped, parent gone True"
        assert parent.stdout.read() == b""  # EOF: the child exited (it held the pipe's other end)
    finally:
        parent.kill()
        if child_pid is not None:
            _kill_if_running(child_pid)


ORPHAN = """
import os, sys, time
from vcascade.app.parent_death import die_with_parent
parent = int(sys.argv[1])
deadline = time.monotonic() + 30
while os.getppid() == parent and time.monotonic() < deadline:  # until re-parented
    time.sleep(0.01)
print("parent kept", die_with_parent(parent), flush=True)
"""

EXITING_PARENT = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())])
os._exit(0)
"""


def test_a_child_whose_parent_died_before_the_request_is_told_so():
    """The race: the parent exits between starting the child and the child's request; the kernel will never
    signal, so the request reports False (the launcher's child then exits instead of starting its component)."""
    out = subprocess.run([sys.executable, "-c", EXITING_PARENT, ORPHAN], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "parent kept False", out.stdout + out.stderr  # read until the child closed it


def _kill_if_running(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

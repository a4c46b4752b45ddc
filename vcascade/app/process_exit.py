"""How a component process ends: normally, unless an abandoned camera read would abort the interpreter's exit.

Kept apart from the launcher so that ``vcascade broker`` and ``vcascade worker`` (which call it) import nothing of
the edge: whether this process is an edge with a hung capture is looked up in ``sys.modules``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


def exit_now(kind: str, code: int, status: Any = None) -> None:
    """End a component process with ``code``; skip interpreter finalisation if a camera read still hangs.

    A camera read the watchdog abandoned may still be blocked inside FFmpeg in a daemon thread
    (:func:`vcascade.edge.capture.source.capture_threads_alive`); at normal interpreter exit such a thread is unwound through
    OpenCV's C++ frames, which aborts the process ("FATAL: exception not rethrown", exit code -6). Only then
    the process leaves with ``os._exit`` after flushing what it wrote (everything it owns is closed by then);
    otherwise it exits normally. ``status``: the report pipe (or queue) to close first.
    """
    if kind != "edge" or not _capture_threads_alive():
        sys.exit(code)
    if status is not None:  # a multiprocessing queue's feeder thread must deliver the final report first
        status.close()
        if hasattr(status, "join_thread"):
            status.join_thread()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _capture_threads_alive() -> bool:
    """True when this process runs an edge (it has loaded the edge's capture module) with a capture thread alive.
    Looked up, not imported: brokers and workers never load OpenCV."""
    source = sys.modules.get("vcascade.edge.capture.source")
    return source is not None and source.capture_threads_alive()

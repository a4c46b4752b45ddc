"""Logging of every vcascade process: one line per event naming the component, text or JSON, with repeated
warnings and errors rate-limited.

:func:`configure_logging` is called once per process (CLI commands and the launcher's children). Every line
carries the component kind and name (``edge:edge-1``); cameras and workers are named in the messages
themselves. The format comes from ``--log-format`` or ``$VCASCADE_LOG_FORMAT`` (``text``, the default, or
``json``: one JSON object per line with ``ts``, ``level``, ``component``, ``name``, ``logger``, ``msg``, and
``repeated``/``exc`` when present). INFO is for lifecycle events (start, connect, state changes), never per
frame or per ROI.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from pathlib import Path

from vcascade.core.redact import RedactingFilter

LOG_FORMATS = ("text", "json")
FORMAT_ENV = "VCASCADE_LOG_FORMAT"
"""Environment variable holding the log format; the CLI sets it so the launcher's children inherit it."""
RATE_LIMIT_INTERVAL_S = 60.0
"""A warning or error with the same logger, message template and ``rate_key`` is written at most once per this many
seconds; the next one written says how many were suppressed."""


def failure_site(exc: BaseException) -> str:
    """``TYPE at FILE:LINE (FUNCTION)`` for an unexpected exception, naming where it was raised (the innermost frame
    of its traceback, the file by its base name) but never its message, which may quote a secret or a personal
    value (a URL, a row of the history): for a log line about a failure whose message is not ours to show."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {Path(last.filename).name}:{last.lineno} ({last.name})"


class RateLimitFilter(logging.Filter):
    """Lets a WARNING-or-above record through at most once per ``interval_s`` per (logger, level, message
    template, rate key); the next record let through carries ``repeated`` (the number suppressed meanwhile) and says
    so in its message. The rate key is the record's ``rate_key`` attribute (``extra={"rate_key": ...}``, e.g. a
    camera's name and state, so that one camera's lines never hide another's), else empty. Records below WARNING
    pass untouched. Thread-safe."""

    def __init__(self, interval_s: float = RATE_LIMIT_INTERVAL_S, clock=time.monotonic) -> None:
        super().__init__()
        self.interval_s, self._clock = interval_s, clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], list[float | int]] = {}  # key -> [last written s, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, f"{record.msg}\0{getattr(record, 'rate_key', '')}")
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return False
            suppressed = int(entry[1]) if entry else 0
            self._seen[key] = [now, 0]
            if len(self._seen) > 10_000:  # bounded: forget the oldest keys
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:5_000]:
                    del self._seen[old]
        if suppressed:
            record.repeated = suppressed
            record.msg = f"{record.msg} (and {suppressed} more like it in the last {self.interval_s:g} s)"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO 8601 UTC), ``level``, ``component``, ``name``, ``logger``, ``msg``,
    plus ``repeated`` and ``exc`` when present."""

    def __init__(self, component: str, name: str | None) -> None:
        super().__init__()
        self.component, self.name = component, name

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "component": self.component, "name": self.name,
            "logger": record.name, "msg": record.getMessage(),
        }  # fmt: skip
        if getattr(record, "repeated", 0):
            line["repeated"] = record.repeated
        if record.exc_info:
            line["exc"] = record.exc_text or self.formatException(record.exc_info)  # exc_text: redacted
        return json.dumps(line, default=str)


def configure_logging(
    level: str, component: str, name: str | None = None, fmt: str | None = None,
    interval_s: float = RATE_LIMIT_INTERVAL_S,
) -> logging.Handler:
    """Configure the root logger of this process: stderr, ``level``, text or JSON, rate-limited warnings.

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING``... (unknown names mean INFO).
        component: the component kind (``edge``, ``broker``, ``worker``) or the command (``vcascade``).
        name: the component's name in the deployment file (None for commands).
        fmt: ``text`` or ``json``; None: ``$VCASCADE_LOG_FORMAT``, else ``text``.
        interval_s: the rate-limit interval of :class:`RateLimitFilter`, seconds.

    Returns:
        The installed handler.

    Raises:
        ValueError: ``fmt`` is not one of :data:`LOG_FORMATS`.
    """
    fmt = fmt or os.environ.get(FORMAT_ENV) or "text"
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler()
    who = f"{component}:{name}" if name else component
    if fmt == "json":
        handler.setFormatter(JsonFormatter(component, name))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {who} %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RateLimitFilter(interval_s))  # first: it keys on the message template (record.msg)
    handler.addFilter(RedactingFilter())  # then: formats the message and hides secrets before any formatter
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    return handler

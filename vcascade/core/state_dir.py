"""The state folder: where a deployment keeps what it writes for later (identity stores, the history store and its
evidence images) when the configuration gives a relative path."""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "VCASCADE_STATE_DIR"
"""Environment variable naming the state folder; default ``state`` in the working directory. Tests set it per test
so that identities and history never leak from one test into another."""


def state_path(path: str) -> Path:
    """``path`` made absolute: as it is when absolute, else inside ``$VCASCADE_STATE_DIR`` (default ``./state``)."""
    given = Path(path).expanduser()
    return given if given.is_absolute() else Path(os.environ.get(STATE_DIR_ENV, "state")) / given

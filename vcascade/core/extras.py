"""Installs per role: which optional dependency group (pip "extra") a command needs, and the one line that says so
when the library it imports is missing.

``pip install vcascade`` installs what every host needs, which is all a broker needs; ``vcascade[edge]`` and
``vcascade[center]`` add each role's heavy libraries and ``vcascade[all]`` both (pyproject.toml,
``[project.optional-dependencies]``). A command run in an install that lacks its extra fails on an
``import``; :func:`missing_extra` turns that :class:`ModuleNotFoundError` into one line naming the extra to
install, so no user reads a traceback to learn that an edge host cannot run a worker.
"""

from __future__ import annotations

BASE = None
"""The extra of a command the base install runs (the broker, ``check``, ``status``, ...): none."""
EDGE = "edge"
CENTER = "center"
ALL = "all"

OPTIONAL_MODULES: dict[str, str] = {
    "cv2": "opencv-python",
    "av": "av",
    "onnxruntime": "onnxruntime",
    "onnx": "onnx",
    "torch": "torch",
    "threadpoolctl": "threadpoolctl",
    "supervision": "supervision",
    "trackers": "trackers",
    "paho": "paho-mqtt",
    "requests": "requests",
    "urllib3": "requests",
    "faiss": "faiss-cpu",
    "redis": "redis",
    "psutil": "psutil",
    "psycopg": "psycopg",
}
"""Top-level import name of every library an extra adds (pyproject.toml), and the distribution providing it.
A missing module not listed here is a broken install, not a missing extra, and keeps its traceback."""


def missing_extra(exc: ModuleNotFoundError, command: str, extra: str | None) -> str | None:
    """The line to print when ``command`` (``"worker"``, ``"run"``, ...) failed with ``exc``, or None when the
    missing module is not one an extra provides.

    ``extra`` is the command's own extra (None for a base command: then ``all``, which holds every library, is
    named, e.g. for ``vcascade check --deep`` on a broker host).
    """
    top = (exc.name or "").partition(".")[0]
    if top not in OPTIONAL_MODULES:
        return None
    wanted = extra or ALL
    return (
        f"vcascade {command}: this install lacks {OPTIONAL_MODULES[top]} (module {top!r}); "
        f"install the {wanted!r} extra: pip install 'vcascade[{wanted}]'"
    )

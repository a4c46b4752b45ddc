"""Model files: find one on disk, or download and verify it once.

Search order for a model file name (an absolute path is used as is):

1. the ``model_dir`` argument (``--model-dir`` on the command line),
2. ``$VCASCADE_MODEL_DIR``,
3. the user cache ``$XDG_CACHE_HOME/vcascade/models`` (default ``~/.cache/vcascade/models``).

A download goes to a temporary file beside its destination, is verified by loading it (the YOLOX release asset
is not byte-identical across exports, so a hash would reject good copies), and is then renamed into place
atomically: a crash or a bad download never leaves a half-written model where the search would find it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vcascade.core.runtime.startup import StartupError

log = logging.getLogger(__name__)

MODEL_DIR_ENV = "VCASCADE_MODEL_DIR"


class ModelUnavailable(RuntimeError, StartupError):
    """A model is neither on disk nor downloadable (network, HTTP error, or not a valid model).

    Recovery: the message says what failed and what to do: download the URL by hand into one of the searched
    folders, or pass ``--model-dir DIR`` / set ``VCASCADE_MODEL_DIR=DIR`` to a folder that holds it.
    """


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vcascade/models``, or ``~/.cache/vcascade/models`` when unset or not absolute (XDG spec)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "vcascade" / "models"


def model_search_dirs(model_dir: str | os.PathLike[str] | None) -> list[Path]:
    """The folders searched for a model, in order: ``model_dir``, ``$VCASCADE_MODEL_DIR``, the user cache."""
    dirs = [Path(model_dir)] if model_dir else []
    if os.environ.get(MODEL_DIR_ENV):
        dirs.append(Path(os.environ[MODEL_DIR_ENV]))
    dirs.append(user_cache_dir())
    unique: list[Path] = []
    for d in (d.expanduser().absolute() for d in dirs):
        if d not in unique:
            unique.append(d)
    return unique


def find_model(name: str, model_dir: str | os.PathLike[str] | None) -> Path | None:
    """The first existing file ``name`` in :func:`model_search_dirs`; an absolute ``name`` only names itself.

    Returns:
        The absolute path, or None when no searched folder holds the file.
    """
    path = Path(name).expanduser()
    if path.is_absolute():
        return path if path.is_file() else None
    for folder in model_search_dirs(model_dir):
        if (folder / path).is_file():
            return folder / path
    return None


def download_model(
    url: str,
    dest: str | os.PathLike[str],
    *,
    verify: Callable[[Path], None],
    timeout_s: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest``: temp file in dest's folder, ``verify(temp)``, atomic rename.

    Args:
        url: http(s) URL of the model file.
        dest: final path; its folder is created if missing.
        timeout_s: socket timeout per blocking operation, s.
        verify: raises (any exception) when the downloaded file is not acceptable (the edge's detector:
            :func:`vcascade.edge.detection.model_file.verify_yolox`).

    Returns:
        ``dest`` as an absolute Path.

    Raises:
        ModelUnavailable: HTTP error, network error, short read, disk error or verification failure; the
            temporary file is removed and ``dest`` is left as it was.
    """
    dest = Path(dest).expanduser().absolute()
    tmp: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part", delete=False) as f:
            tmp = Path(f.name)
            _fetch(url, f, timeout_s)
        verify(tmp)
        os.replace(tmp, dest)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one actionable error
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise ModelUnavailable(_unavailable_message(dest, url, _reason(exc))) from exc
    return dest


def _fetch(url: str, out: BinaryIO, timeout_s: float) -> None:
    """Stream ``url`` into the open binary file ``out``; OSError on a short read."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - URL comes from the config
        shutil.copyfileobj(response, out, length=1 << 20)
        expected = response.headers.get("Content-Length")
    out.flush()
    os.fsync(out.fileno())
    if expected is not None and out.tell() != int(expected):
        raise OSError(f"short read: got {out.tell()} of {expected} bytes")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"network error: {exc.reason}"
    return str(exc) or type(exc).__name__


def _unavailable_message(dest: Path, url: str, reason: str) -> str:
    searched = ", ".join(str(d) for d in model_search_dirs(dest.parent))
    return (
        f"model {dest.name} is unavailable: downloading {url} failed: {reason}. "
        f"To fix: download {url} yourself and save it as {dest.name} in one of the searched folders "
        f"({searched}), or pass --model-dir DIR / set {MODEL_DIR_ENV}=DIR to a folder that holds it."
    )


def writable_dir(folder: Path) -> bool:
    """True when ``folder`` exists (or can be created) and the process may create files in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)

"""Find the detector model on disk, or download and verify it once.

Search order for a model file name (an absolute path is used as is):

1. the ``model_dir`` argument (``--model-dir`` on the command line),
2. ``$VCASCADE_MODEL_DIR``,
3. the user cache ``$XDG_CACHE_HOME/vcascade/models`` (default ``~/.cache/vcascade/models``).

A download goes to a temporary file beside its destination, is verified by loading it (the YOLOX release asset
is not byte-identical across exports, so a hash would reject good copies), and is then renamed into place
atomically: a crash or a bad download never leaves a half-written model where the search would find it.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vcascade.config import DetectorConfig

log = logging.getLogger(__name__)

MODEL_DIR_ENV = "VCASCADE_MODEL_DIR"


class ModelUnavailable(RuntimeError):
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


def verify_yolox(path: str | os.PathLike[str], input_size: int = 416) -> None:
    """Check that a file is a YOLOX ONNX model for ``input_size`` (loads it with ONNX Runtime, CPU, 1 thread).

    Raises:
        ModelUnavailable: the file is not a loadable ONNX model, or its signature does not fit
            (:func:`edge.detector.check_yolox_signature`).
    """
    # Imported here: brokers and workers import vcascade.* and should not pay for OpenCV and ONNX Runtime.
    from edge.detector import check_yolox_signature
    from vcascade.onnx_session import make_session

    try:
        session = make_session(path, intra_op_threads=1)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types for unreadable models
        raise ModelUnavailable(f"{path} is not a loadable ONNX model: {exc}") from exc
    try:
        check_yolox_signature(session, input_size, model_path=str(path))
    except ValueError as exc:
        raise ModelUnavailable(f"{path}: {exc}") from exc


def download_model(
    url: str,
    dest: str | os.PathLike[str],
    *,
    timeout_s: float = 60.0,
    verify: Callable[[Path], None] = verify_yolox,
) -> Path:
    """Download ``url`` to ``dest``: temp file in dest's folder, ``verify(temp)``, atomic rename.

    Args:
        url: http(s) URL of the model file.
        dest: final path; its folder is created if missing.
        timeout_s: socket timeout per blocking operation, s.
        verify: raises (any exception) when the downloaded file is not acceptable; default :func:`verify_yolox`.

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


def ensure_detector_model(detector_cfg: DetectorConfig, model_dir: str | os.PathLike[str] | None) -> Path:
    """Path to the detector model: ``detector_cfg.path`` when set (user models, never downloaded), else found on
    disk (:func:`find_model`), else downloaded from ``detector_cfg.url``
    into ``model_dir`` (when given and writable) or the user cache, and verified (:func:`verify_yolox`).

    Raises:
        ModelUnavailable: not found and the download or verification failed, or ``detector_cfg.model`` is an
            absolute path to a missing file (absolute paths are never downloaded to).
    """
    if detector_cfg.path is not None:
        return _local_model(detector_cfg.path)
    name = detector_cfg.model
    found = find_model(name, model_dir)
    if found is not None:
        log.info("using detector model %s", found)
        return found
    if Path(name).expanduser().is_absolute():
        raise ModelUnavailable(
            f"detector model {name} does not exist. To fix: download {detector_cfg.url} and save it there, or "
            f"set the detector's `model` to a file name found in --model-dir DIR / {MODEL_DIR_ENV}=DIR."
        )
    folder = Path(model_dir) if model_dir and _writable_dir(Path(model_dir)) else user_cache_dir()
    dest = folder / name
    log.info("downloading detector model %s from %s", dest, detector_cfg.url)
    verify = functools.partial(verify_yolox, input_size=detector_cfg.input_size)
    dest = download_model(detector_cfg.url, dest, verify=verify)
    log.info("verified detector model %s", dest)
    return dest


def _local_model(path: str) -> Path:
    """The detector config's ``path`` (a user model: used as is, never downloaded); ModelUnavailable if missing."""
    local = Path(path).expanduser().absolute()
    if not local.is_file():
        raise ModelUnavailable(f"detector model {local} (the detector's `path`) does not exist or is not a file")
    log.info("using detector model %s", local)
    return local


def _writable_dir(folder: Path) -> bool:
    """True when ``folder`` exists (or can be created) and the process may create files in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)

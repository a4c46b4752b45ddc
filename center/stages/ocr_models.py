"""Fetch the PP-OCRv6 text models (recognition ``PP-OCRv6_rec_small.onnx``, detection ``PP-OCRv6_det_small.onnx``)
out of the ``rapidocr`` wheel.

The models ship inside the ``rapidocr`` wheel on PyPI (``rapidocr/models/<name>``, Apache-2.0; PaddleOCR's
PP-OCRv6 models converted to ONNX by the RapidOCR project).
Installing that package would break this one (it requires ``opencv-python-headless``, which installs the same
``cv2`` module as our ``opencv-python``), so the wheel is only downloaded, never installed:

1. the wheel's URL and SHA-256 come from the package index's JSON Simple API (PEP 691), or ``wheel_url`` is
   given directly;
2. the wheel is downloaded to a temporary file beside the destination and its SHA-256 checked (against the
   pinned :data:`RAPIDOCR_WHEEL_SHA256`, or the index's hash when the pin is None);
3. the model member is extracted (a wheel is a zip file) to another temporary file, verified by loading it
   with ONNX Runtime and checking its signature (:func:`verify_ppocr_rec`, :func:`verify_ppocr_det`), then
   renamed into place.

The search order for an existing copy is :func:`vcascade.core.runtime.models.find_model`'s (``--model-dir``,
``$VCASCADE_MODEL_DIR``, the user cache).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from vcascade.center.heads.text import read_model_charset
from vcascade.core.runtime.models import (
    MODEL_DIR_ENV,
    ModelUnavailable,
    _fetch,
    _reason,
    find_model,
    model_search_dirs,
    user_cache_dir,
    writable_dir,
)
from vcascade.core.runtime.onnx_session import make_session

log = logging.getLogger(__name__)

PPOCR_REC_MODEL = "PP-OCRv6_rec_small.onnx"
"""File name of the text-recognition model, in the model folders and inside the wheel."""
PPOCR_DET_MODEL = "PP-OCRv6_det_small.onnx"
"""File name of the text-detection model (DB), in the model folders and inside the wheel."""
RAPIDOCR_PROJECT = "rapidocr"
RAPIDOCR_WHEEL = "rapidocr-3.10.0-py3-none-any.whl"
"""The wheel that carries the model (rapidocr 3.10.0, PyPI)."""
RAPIDOCR_WHEEL_SHA256 = "2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050"
"""SHA-256 of :data:`RAPIDOCR_WHEEL` as listed by PyPI's Simple API (checked against a download, 2026-11-30)."""
RAPIDOCR_MODELS = "rapidocr/models"
"""Folder of the models inside the wheel."""
RAPIDOCR_WHEEL_MEMBER = f"{RAPIDOCR_MODELS}/{PPOCR_REC_MODEL}"
PYPI_SIMPLE_URL = "https://pypi.org/simple"
PPOCR_INPUT_HEIGHT_PX = 48
"""Input height of PaddleOCR's PP-OCR recognition models, px (input (N, 3, 48, W))."""
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
"""PEP 691 media type of the JSON Simple API."""


def to_fix(name: str) -> str:
    """The hint every "text model unavailable" message ends with (like the detector's), for model ``name``."""
    return (
        f"To fix: download {RAPIDOCR_WHEEL} from PyPI (pip download rapidocr==3.10.0 --no-deps), extract its member "
        f"{RAPIDOCR_MODELS}/{name} (a wheel is a zip file) and save {name} in --model-dir DIR / {MODEL_DIR_ENV}=DIR."
    )


TO_FIX = to_fix(PPOCR_REC_MODEL)
"""The hint of the recognition model."""


def verify_ppocr_rec(path: str | os.PathLike[str]) -> None:
    """Check that a file is a PaddleOCR CTC recognition model: ONNX Runtime loads it (CPU, 1 thread), its one
    input is (N, 3, 48, W), its first output (N, T, C), and C = its ``character`` metadata entries + 2 (blank,
    characters, space; see :mod:`vcascade.center.heads.text`).

    Raises:
        ModelUnavailable: not loadable, or the signature or metadata does not fit (the message says which).
    """
    try:
        session = make_session(path, intra_op_threads=1)
        charset = read_model_charset(str(path))
    except Exception as exc:  # noqa: BLE001 - ORT and onnx raise their own types for unreadable models
        raise ModelUnavailable(f"{path} is not a PP-OCR recognition model: {exc}") from exc
    inputs, outputs = session.get_inputs(), session.get_outputs()
    shape_in, shape_out = inputs[0].shape, outputs[0].shape
    if len(inputs) != 1 or len(shape_in) != 4 or shape_in[1:3] != [3, PPOCR_INPUT_HEIGHT_PX]:
        raise ModelUnavailable(f"{path}: input {[(i.name, i.shape) for i in inputs]}, expected one (N, 3, 48, W)")
    if len(shape_out) != 3 or shape_out[2] != len(charset) + 2:
        raise ModelUnavailable(
            f"{path}: output {outputs[0].name} {shape_out}, expected (N, T, {len(charset) + 2}) for "
            f"{len(charset)} characters + blank + space"
        )


def verify_ppocr_det(path: str | os.PathLike[str]) -> None:
    """Check that a file is a DB text-detection model: ONNX Runtime loads it (CPU, 1 thread), its one input is
    (N, 3, H, W) and its first output (N, 1, H, W) (:func:`vcascade.center.stages.text_pipeline.check_detector`'s
    shapes, as the session sees them).

    Raises:
        ModelUnavailable: not loadable, or the signature does not fit (the message says which).
    """
    try:
        session = make_session(path, intra_op_threads=1)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types for unreadable models
        raise ModelUnavailable(f"{path} is not a PP-OCR detection model: {exc}") from exc
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].shape[1] != 3:
        raise ModelUnavailable(f"{path}: input {[(i.name, i.shape) for i in inputs]}, expected one (N, 3, H, W)")
    if len(outputs[0].shape) != 4 or outputs[0].shape[1] not in (1, None) and not isinstance(outputs[0].shape[1], str):
        raise ModelUnavailable(f"{path}: output {outputs[0].name} {outputs[0].shape}, expected (N, 1, H, W)")


VERIFY = {PPOCR_REC_MODEL: verify_ppocr_rec, PPOCR_DET_MODEL: verify_ppocr_det}
"""How each model of the wheel is checked once extracted, by file name."""


def find_wheel(
    project: str, filename: str, index_url: str = PYPI_SIMPLE_URL, timeout_s: float = 60.0
) -> tuple[str, str]:
    """The download URL and SHA-256 of one file of a project, from a PEP 691 JSON Simple API index.

    Returns:
        ``(absolute URL, sha256 hex)``; the hash is '' when the index gives none.

    Raises:
        ModelUnavailable: network or HTTP error, a page that is not PEP 691 JSON, or no such file listed.
    """
    page = f"{index_url.rstrip('/')}/{project}/"
    request = urllib.request.Request(page, headers={"Accept": SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - index URL from the caller
            files = json.loads(response.read())["files"]
    except Exception as exc:  # noqa: BLE001 - every failure becomes one actionable error
        raise ModelUnavailable(f"cannot list {project} on {page}: {_reason(exc)}") from exc
    for entry in files:
        if entry.get("filename") == filename:
            return urllib.parse.urljoin(page, entry["url"]), entry.get("hashes", {}).get("sha256", "")
    raise ModelUnavailable(f"{page} lists no file {filename}")


def download_from_wheel(
    wheel_url: str, member: str, dest: str | os.PathLike[str], *, sha256: str = "", timeout_s: float = 300.0
) -> Path:
    """Download a wheel, check its SHA-256, extract ``member`` to ``dest`` and verify it (:data:`VERIFY` by the
    member's file name; :func:`verify_ppocr_rec` for another name).

    Args:
        wheel_url: http(s) URL of the wheel.
        member: path of the model inside the wheel (zip).
        dest: final model path; its folder is created if missing.
        sha256: expected hex SHA-256 of the wheel ('' skips the check).
        timeout_s: socket timeout per blocking operation, s.

    Returns:
        ``dest`` as an absolute Path.

    Raises:
        ModelUnavailable: download, hash, zip, missing member, disk or verification failure; temporary files
            are removed and ``dest`` is left as it was.
    """
    dest = Path(dest).expanduser().absolute()
    temps: list[Path] = []
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        wheel = _temp_beside(dest, ".whl", temps)
        with wheel.open("wb") as out:
            _fetch(wheel_url, out, timeout_s)
        _check_sha256(wheel, sha256)
        model = _temp_beside(dest, ".part", temps)
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, model.open("wb") as out:
            shutil.copyfileobj(src, out, length=1 << 20)
        VERIFY.get(Path(member).name, verify_ppocr_rec)(model)
        os.replace(model, dest)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one actionable error
        raise ModelUnavailable(_wheel_message(dest, wheel_url, member, _reason(exc))) from exc
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    return dest


def _wheel_message(dest: Path, wheel_url: str, member: str, reason: str) -> str:
    searched = ", ".join(str(d) for d in model_search_dirs(dest.parent))
    return (
        f"model {dest.name} is unavailable: fetching it from {wheel_url} failed: {reason}. To fix: download "
        f"that wheel yourself (e.g. `pip download {RAPIDOCR_PROJECT}==3.10.0 --no-deps`; do not install it), unzip "
        f"{member} from it and save it as {dest.name} in one of the searched folders ({searched}), or pass "
        f"--model-dir DIR / set {MODEL_DIR_ENV}=DIR to a folder that holds it."
    )


def _temp_beside(dest: Path, suffix: str, temps: list[Path]) -> Path:
    handle, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=suffix)
    os.close(handle)
    temps.append(Path(name))
    return temps[-1]


def _check_sha256(path: Path, expected: str) -> None:
    if not expected:
        return
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected.lower():
        raise ValueError(f"wheel SHA-256 {digest.hexdigest()} differs from the expected {expected}")


def ensure_text_model(
    model_dir: str | os.PathLike[str] | None,
    *,
    index_url: str = PYPI_SIMPLE_URL,
    wheel_url: str | None = None,
    sha256: str | None = RAPIDOCR_WHEEL_SHA256,
    name: str = PPOCR_REC_MODEL,
) -> Path:
    """Path to the text model ``name`` (``PP-OCRv6_rec_small.onnx`` or ``PP-OCRv6_det_small.onnx``): found on disk
    (:func:`vcascade.core.runtime.models.find_model`), else extracted from the rapidocr wheel into ``model_dir``
    (when writable) or the user cache.

    Args:
        model_dir: folder searched first, and where a download goes when writable.
        name: the model's file name (one of :data:`VERIFY`).
        index_url: PEP 691 Simple API base used to find the wheel when ``wheel_url`` is None.
        wheel_url: the wheel's URL, skipping the index.
        sha256: expected wheel SHA-256; None: the index's hash (none at all when ``wheel_url`` is given).

    Raises:
        ModelUnavailable: not found, and listing, downloading, checking or verifying failed.
    """
    found = find_model(name, model_dir)
    if found is not None:
        log.info("using text model %s", found)
        return found
    index_sha256 = ""
    folder = Path(model_dir) if model_dir and writable_dir(Path(model_dir)) else user_cache_dir()
    try:
        if wheel_url is None:
            wheel_url, index_sha256 = find_wheel(RAPIDOCR_PROJECT, RAPIDOCR_WHEEL, index_url)
        log.info("extracting %s from %s into %s", name, wheel_url, folder)
        expected = index_sha256 if sha256 is None else sha256
        dest = download_from_wheel(wheel_url, f"{RAPIDOCR_MODELS}/{name}", folder / name, sha256=expected)
    except ModelUnavailable as exc:
        why = f"text model {name} is missing and could not be fetched ({exc})"
        raise ModelUnavailable(f"{why}. {to_fix(name)}") from exc
    log.info("verified text model %s", dest)
    return dest

"""Model find/fetch against a real local HTTP server (never the internet)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from vcascade.center.stages.ocr_models import (
    PPOCR_DET_MODEL,
    PPOCR_REC_MODEL,
    RAPIDOCR_WHEEL,
    RAPIDOCR_WHEEL_MEMBER,
    download_from_wheel,
    ensure_text_model,
    find_wheel,
    verify_ppocr_det,
    verify_ppocr_rec,
)
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.models import (
    ModelUnavailable,
    download_model,
    find_model,
    model_search_dirs,
)
from vcascade.core.runtime.startup import StartupError
from vcascade.edge.detection.model_file import ensure_detector_model, verify_yolox

REPO = Path(__file__).resolve().parents[3]
NAME = "yolox_nano.onnx"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


@pytest.fixture
def served(tmp_path: Path, yolox_path: Path):
    """Base URL of a ThreadingHTTPServer on 127.0.0.1 serving the real model and an HTML page posing as one."""
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(yolox_path, root / NAME)
    (root / "fake.onnx").write_bytes(b"<!DOCTYPE html><html><body>Sign in to continue</body></html>\n")
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch) -> Path:
    """No $VCASCADE_MODEL_DIR, and the user cache moved into tmp_path; returns the cache's models folder."""
    monkeypatch.delenv("VCASCADE_MODEL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "vcascade" / "models"


# ---------------------------------------------------------------- download


def test_download_succeeds_and_verifies(served, tmp_path, yolox_path):
    dest = tmp_path / "models" / NAME
    assert download_model(f"{served}/{NAME}", dest, verify=verify_yolox) == dest
    assert dest.read_bytes() == yolox_path.read_bytes()
    assert os.listdir(dest.parent) == [NAME]  # no temporary file left


def test_http_404_says_what_failed_and_what_to_do(served, tmp_path, isolated_env):
    dest = tmp_path / "models" / NAME
    url = f"{served}/missing.onnx"
    with pytest.raises(ModelUnavailable) as info:
        download_model(url, dest, verify=verify_yolox)
    message = str(info.value)
    for needed in ("HTTP 404", url, str(dest.parent), str(isolated_env), "--model-dir", "VCASCADE_MODEL_DIR"):
        assert needed in message
    assert os.listdir(dest.parent) == []


def test_connection_refused_is_model_unavailable(tmp_path, free_port, isolated_env):
    with pytest.raises(ModelUnavailable, match="network error"):
        download_model(f"http://127.0.0.1:{free_port()}/{NAME}", tmp_path / NAME, verify=verify_yolox, timeout_s=5)


def test_html_served_as_model_is_rejected_and_nothing_left_behind(served, tmp_path, isolated_env):
    dest = tmp_path / "models" / NAME
    dest.parent.mkdir()
    dest.write_bytes(b"previous")
    with pytest.raises(ModelUnavailable, match="not a loadable ONNX model"):
        download_model(f"{served}/fake.onnx", dest, verify=verify_yolox)
    assert os.listdir(dest.parent) == [NAME]
    assert dest.read_bytes() == b"previous"  # the old file is untouched by a failed download


def test_verify_yolox_checks_the_input_size(yolox_path):
    verify_yolox(yolox_path, input_size=416)
    with pytest.raises(ModelUnavailable, match="input_size 640"):
        verify_yolox(yolox_path, input_size=640)


# ---------------------------------------------------------------- find order


def test_find_order_model_dir_then_env_then_cache(tmp_path, monkeypatch, isolated_env):
    given, env = tmp_path / "given", tmp_path / "env"
    for folder in (given, env, isolated_env):
        folder.mkdir(parents=True)
        (folder / NAME).write_bytes(b"x")
    monkeypatch.setenv("VCASCADE_MODEL_DIR", str(env))
    assert model_search_dirs(given) == [given, env, isolated_env]
    assert find_model(NAME, given) == given / NAME
    assert find_model(NAME, None) == env / NAME
    (env / NAME).unlink()
    assert find_model(NAME, None) == isolated_env / NAME
    (isolated_env / NAME).unlink()
    assert find_model(NAME, None) is None
    assert find_model(NAME, given) == given / NAME


def test_find_absolute_path_names_only_itself(tmp_path, isolated_env):
    isolated_env.mkdir(parents=True)
    (isolated_env / NAME).write_bytes(b"x")
    assert find_model(str(isolated_env / NAME), tmp_path) == isolated_env / NAME
    assert find_model(str(tmp_path / NAME), None) is None


def test_default_cache_is_home_dot_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("VCASCADE_MODEL_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model_search_dirs(None) == [tmp_path / ".cache" / "vcascade" / "models"]


# ---------------------------------------------------------------- ensure_detector_model


def test_ensure_downloads_into_model_dir_then_finds_it(served, tmp_path, isolated_env, caplog):
    config = YoloxDetectorConfig(url=f"{served}/{NAME}")
    model_dir = tmp_path / "models"
    with caplog.at_level(logging.INFO, logger="vcascade.edge.detection.model_file"):
        path = ensure_detector_model(config, model_dir)
    assert path == model_dir / NAME and path.is_file()
    assert "downloading" in caplog.text and config.url in caplog.text and "verified" in caplog.text
    caplog.clear()
    broken = YoloxDetectorConfig(url=f"{served}/missing.onnx")
    with caplog.at_level(logging.INFO, logger="vcascade.edge.detection.model_file"):
        assert ensure_detector_model(broken, model_dir) == path  # found: no download attempted
    assert "downloading" not in caplog.text


def test_ensure_falls_back_to_user_cache_when_model_dir_unusable(served, tmp_path, isolated_env):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    config = YoloxDetectorConfig(url=f"{served}/{NAME}")
    assert ensure_detector_model(config, blocker / "models") == isolated_env / NAME
    assert ensure_detector_model(config, None) == isolated_env / NAME


def test_ensure_downloads_the_model_and_opens_its_copy_at_another_input_size(served, tmp_path, isolated_env):
    config = YoloxDetectorConfig(url=f"{served}/{NAME}", input_size=640)
    path = ensure_detector_model(config, tmp_path / "models")
    assert path == tmp_path / "models" / NAME.replace(".onnx", ".640.onnx")
    assert sorted(os.listdir(tmp_path / "models")) == sorted([NAME, path.name])
    verify_yolox(path, input_size=640)  # the copy passes the edge's check at 640; the download is kept at 416
    verify_yolox(tmp_path / "models" / NAME, input_size=416)


def test_ensure_never_downloads_to_a_missing_absolute_path(served, tmp_path, isolated_env):
    config = YoloxDetectorConfig(model=str(tmp_path / NAME), url=f"{served}/{NAME}")
    with pytest.raises(ModelUnavailable, match="does not exist"):
        ensure_detector_model(config, None)


# ---------------------------------------------------------------- tools/fetch_models.py


def _fetch_script(*args: str, xdg: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VCASCADE_MODEL_DIR"} | {"XDG_CACHE_HOME": str(xdg)}
    command = [sys.executable, "-m", "tools.fetch_models", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_fetch_script_prints_the_path(served, tmp_path):
    done = _fetch_script("--model-dir", str(tmp_path / "m"), "--url", f"{served}/{NAME}", xdg=tmp_path / "xdg")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "m" / NAME)


def test_fetch_script_exits_1_with_the_helpful_message(served, tmp_path):
    done = _fetch_script("--model-dir", str(tmp_path / "m"), "--url", f"{served}/nope.onnx", xdg=tmp_path / "xdg")
    assert done.returncode == 1
    assert "HTTP 404" in done.stderr and "--model-dir" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- PP-OCR text model from the rapidocr wheel


def _wheel(path: Path, members: dict[str, Path | bytes]) -> str:
    """Write a wheel (zip, stored) with ``members`` at their paths; returns its SHA-256 hex."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members.items():
            if isinstance(content, Path):
                archive.write(content, name)
            else:
                archive.writestr(name, content)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def wheel_index(served, tmp_path, models_dir) -> tuple[str, str]:
    """(index URL, wheel SHA-256): a PEP 691 page for rapidocr on the local server, listing a wheel built here
    with the real PP-OCRv6_rec_small.onnx at its place in the rapidocr wheel; plus ``bad.whl``, the YOLOX model
    at that place."""
    www = tmp_path / "www"
    (www / "files").mkdir()
    sha256 = _wheel(www / "files" / RAPIDOCR_WHEEL, {
        "rapidocr/__init__.py": b"", RAPIDOCR_WHEEL_MEMBER: models_dir / PPOCR_REC_MODEL,
        f"rapidocr/models/{PPOCR_DET_MODEL}": models_dir / PPOCR_DET_MODEL,
    })
    _wheel(www / "files" / "bad.whl", {RAPIDOCR_WHEEL_MEMBER: models_dir / NAME})
    page = www / "simple" / "rapidocr"
    page.mkdir(parents=True)
    files = [{"filename": RAPIDOCR_WHEEL, "url": f"../../files/{RAPIDOCR_WHEEL}", "hashes": {"sha256": sha256}}]
    (page / "index.html").write_text(json.dumps({"meta": {"api-version": "1.0"}, "name": "rapidocr", "files": files}))
    return f"{served}/simple", sha256


def test_text_model_is_extracted_from_the_listed_wheel_and_verified(wheel_index, tmp_path, isolated_env, models_dir):
    index_url, _ = wheel_index
    model_dir = tmp_path / "m"
    path = ensure_text_model(model_dir, index_url=index_url, sha256=None)  # the index's hash
    assert path == model_dir / PPOCR_REC_MODEL
    assert path.read_bytes() == (models_dir / PPOCR_REC_MODEL).read_bytes()
    assert os.listdir(model_dir) == [PPOCR_REC_MODEL]  # no wheel or partial file left
    assert ensure_text_model(model_dir, index_url="http://127.0.0.1:9/unreachable") == path  # found: no fetch


def test_text_model_wheel_with_another_hash_is_rejected(wheel_index, tmp_path, isolated_env):
    index_url, _ = wheel_index
    with pytest.raises(ModelUnavailable) as info:
        ensure_text_model(tmp_path / "m", index_url=index_url)  # pinned hash of the real PyPI wheel
    assert "SHA-256" in str(info.value) and "pip download rapidocr==3.10.0 --no-deps" in str(info.value)
    assert os.listdir(tmp_path / "m") == []


def test_text_model_of_the_wrong_kind_or_missing_is_rejected(wheel_index, served, tmp_path, isolated_env):
    with pytest.raises(ModelUnavailable, match="not a PP-OCR recognition model"):
        download_from_wheel(f"{served}/files/bad.whl", RAPIDOCR_WHEEL_MEMBER, tmp_path / "m" / PPOCR_REC_MODEL)
    with pytest.raises(ModelUnavailable, match="no item named"):
        download_from_wheel(f"{served}/files/{RAPIDOCR_WHEEL}", "rapidocr/models/nope.onnx", tmp_path / "m" / "x.onnx")
    with pytest.raises(ModelUnavailable, match="lists no file"):
        find_wheel("rapidocr", "rapidocr-0.0.1-py3-none-any.whl", wheel_index[0])
    assert os.listdir(tmp_path / "m") == []


def test_verify_ppocr_rec_accepts_the_real_model_and_rejects_yolox(models_dir):
    verify_ppocr_rec(models_dir / PPOCR_REC_MODEL)
    with pytest.raises(ModelUnavailable):
        verify_ppocr_rec(models_dir / NAME)


def test_fetch_script_text_prints_both_paths(wheel_index, served, tmp_path):
    m = tmp_path / "m"
    done = _fetch_script("--model-dir", str(m), "--url", f"{served}/{NAME}", "--text",
                         "--wheel-url", f"{served}/files/{RAPIDOCR_WHEEL}", xdg=tmp_path / "xdg")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(m / NAME), str(m / PPOCR_REC_MODEL), str(m / PPOCR_DET_MODEL)]


def test_text_model_unreachable_index_gets_the_same_to_fix_hint_as_the_detector(tmp_path, isolated_env):
    """Issue 18: a missing text model ended as ``cannot list rapidocr on <index>`` with no hint."""
    with pytest.raises(ModelUnavailable) as info:
        ensure_text_model(tmp_path / "m", index_url="http://127.0.0.1:9/unreachable")
    message = str(info.value)
    assert message.startswith(f"text model {PPOCR_REC_MODEL} is missing and could not be fetched (cannot list")
    assert "To fix: download" in message and "--model-dir DIR / VCASCADE_MODEL_DIR=DIR" in message
    assert isinstance(info.value, StartupError)  # a worker that raises it is not restarted


def test_detection_model_is_extracted_from_the_wheel_and_checked(wheel_index, tmp_path, isolated_env, models_dir):
    index_url, _ = wheel_index
    path = ensure_text_model(tmp_path / "m", index_url=index_url, sha256=None, name=PPOCR_DET_MODEL)
    assert path.read_bytes() == (models_dir / PPOCR_DET_MODEL).read_bytes()
    verify_ppocr_det(path)
    with pytest.raises(ModelUnavailable, match=r"expected \(N, 1, H, W\)|expected one \(N, 3, H, W\)"):
        verify_ppocr_det(models_dir / NAME)  # YOLOX: (1, 3549, 85) out

"""The face model: found on disk, downloaded only by ``tools.fetch_models --faces`` from a real local HTTP server
(never the internet here), its SHA-256 checked and the file loaded before it is put in place; a missing or
unfit model is a ``ModelUnavailable`` saying what to do."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vcascade.core.config import FaceRedactionConfig
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.schema.privacy import CENTERFACE_MODEL, CENTERFACE_SHA256
from vcascade.edge.privacy.model_file import PrivacyModels, download_face_model

REPO = Path(__file__).resolve().parents[3]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


@pytest.fixture
def served(tmp_path: Path, models_dir: Path):
    """Base URL of a local HTTP server with the real centerface.onnx and a copy with one byte changed."""
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(models_dir / CENTERFACE_MODEL, root / CENTERFACE_MODEL)
    tampered = bytearray((models_dir / CENTERFACE_MODEL).read_bytes())
    tampered[-1] ^= 0xFF
    (root / "tampered.onnx").write_bytes(bytes(tampered))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("VCASCADE_MODEL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_the_shared_copy_is_the_official_file(models_dir):
    assert hashlib.sha256((models_dir / CENTERFACE_MODEL).read_bytes()).hexdigest() == CENTERFACE_SHA256


def test_download_checks_the_hash_and_loads_the_model(served, tmp_path, models_dir):
    path = download_face_model(tmp_path / "m", f"{served}/{CENTERFACE_MODEL}")
    assert path == tmp_path / "m" / CENTERFACE_MODEL
    assert path.read_bytes() == (models_dir / CENTERFACE_MODEL).read_bytes()
    assert download_face_model(tmp_path / "m", f"{served}/gone.onnx") == path  # found: not downloaded again


def test_a_file_with_another_hash_is_refused_and_not_kept(served, tmp_path):
    with pytest.raises(ModelUnavailable, match="SHA-256 [0-9a-f]{64} differs from the expected " + CENTERFACE_SHA256):
        download_face_model(tmp_path / "m", f"{served}/tampered.onnx")
    assert os.listdir(tmp_path / "m") == []


def test_missing_or_unfit_model_says_what_to_do(tmp_path, models_dir):
    faces = PrivacyModels(tmp_path)
    missing = r"face model centerface.onnx not found. To fix: run `python -m tools.fetch_models --faces`"
    with pytest.raises(ModelUnavailable, match=missing):
        faces.faces(FaceRedactionConfig())
    with pytest.raises(ModelUnavailable, match="is not a loadable CenterFace ONNX model|not CenterFace"):
        faces.faces(FaceRedactionConfig(model=str(models_dir / "yolox_nano.onnx")))
    assert faces.faces(FaceRedactionConfig(model=str(models_dir / CENTERFACE_MODEL))) is not None


def test_fetch_script_fetches_the_face_model(served, tmp_path, models_dir):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    shutil.copy(models_dir / "yolox_nano.onnx", model_dir)  # the detector is there already: only faces download
    env = {k: v for k, v in os.environ.items() if k != "VCASCADE_MODEL_DIR"} | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    command = [sys.executable, "-m", "tools.fetch_models", "--model-dir", str(model_dir), "--faces",
               "--faces-url", f"{served}/{CENTERFACE_MODEL}"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(model_dir / "yolox_nano.onnx"), str(model_dir / CENTERFACE_MODEL)]

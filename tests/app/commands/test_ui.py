"""``vcascade ui FILE``: serves the view until SIGTERM, exits 0; a non-loopback bind without a token is refused
with exit code 2 before anything is bound; a taken port is a clear error, exit 1; like-queries load the embedding
recognizer's model from ``--model-dir``."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import onnx
import yaml

from tests.app.test_ui_history_api import get
from tests.app.ui_history import enrol_like, fill_history
from tests.demo import EMBEDDER, demo_data
from vcascade.app.cli import main
from vcascade.center.stages.torch_onnx import torch_to_onnx
from vcascade.center.stages.torch_stages import build_model
from vcascade.core.config import Deployment, load_config


def write(tmp_path, **ui) -> str:
    data = demo_data()
    data["ui"] = ui
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_remote_bind_without_a_token_is_refused(tmp_path, capsys):
    assert main(["ui", write(tmp_path), "--bind", "0.0.0.0"]) == 2
    assert "--bind 0.0.0.0: a non-loopback address needs ui.token" in capsys.readouterr().err


def test_a_taken_port_is_a_clear_error(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["ui", write(tmp_path), "--port", str(taken.getsockname()[1])]) == 1
    assert "cannot bind 127.0.0.1" in capsys.readouterr().err


def test_serves_the_page_until_sigterm(tmp_path, free_port):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "vcascade", "ui", write(tmp_path, port=port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip().endswith(f"http://127.0.0.1:{port}/")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.status == 200 and b"vcascade live view" in answer.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()


def test_a_like_query_loads_the_embedding_model_from_model_dir(tmp_path, free_port, bikes_path, monkeypatch):
    history = fill_history(bikes_path)
    models = tmp_path / "models"  # the embedder as an ONNX file that only --model-dir names
    models.mkdir()
    torch_cfg = Deployment.model_validate(demo_data()).recognizers[EMBEDDER]
    onnx.save(torch_to_onnx(build_model(torch_cfg), torch_cfg.input_hw), models / "reid-embedder.onnx")
    data = demo_data()
    data["recognizers"][EMBEDDER] = {"type": "onnx", "model": "reid-embedder.onnx", "head": torch_cfg.head.model_dump()}
    data["workers"]["worker-1"]["devices"] = ["cpu"]  # one stage
    port = free_port()
    data["ui"] = {"port": port}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    ref = enrol_like(load_config(path), history, str(models))
    monkeypatch.delenv("VCASCADE_MODEL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nor in the user cache
    proc = subprocess.Popen([sys.executable, "-m", "vcascade", "ui", str(path), "--model-dir", str(models)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip().endswith(f"http://127.0.0.1:{port}/"), proc.stderr.read()
        status, body, _ = get(f"http://127.0.0.1:{port}/api/history/search?like={ref}", headers={})
        assert status == 200, body
        assert [n["identity"] for n in json.loads(body)["like"]] == [7]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

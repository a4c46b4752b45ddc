"""``vcascade ui FILE``: serves the view until SIGTERM, exits 0; a non-loopback bind without a token is refused
with exit code 2 before anything is bound; a taken port is a clear error, exit 1."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request

import yaml

from tests.demo import demo_data
from vcascade.app.cli import main


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

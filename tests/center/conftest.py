"""Fixtures for the center tests: real frames from bikes.mp4, the real MobileNetV2 embedder split in two."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import zmq

from tests.demo import demo_data
from vcascade.center.stages.torch_stages import build_model, split_model
from vcascade.center.worker import run_worker
from vcascade.core.schema import WorkerSettings
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment
from vcascade.core.transport.sockets import make_socket

REPO = Path(__file__).resolve().parents[2]
torch.set_num_threads(1)
cv2.setNumThreads(1)

# Regions picked by looking at the frames (written to PNG and viewed): rows y0:y1, columns x0:x1, px.
PARKED_BIKE = (slice(40, 272), slice(195, 335))
"""A bicycle locked to the railing, frames ~140..186 (the camera drifts ~10 px over that span)."""
PARKED_BIKE_FRAMES = (150, 160, 170, 180)
CAR = (150, slice(95, 170), slice(520, 625))
"""(frame, rows, columns): a dark car driving behind the railing, right of the bike."""
TRUCK_ROOF = (0, slice(0, 272), slice(200, 460))
"""(frame, rows, columns): the white roof of a vehicle seen from above, first shot of the video."""


@pytest.fixture(scope="session")
def bikes_frames(bikes_path: Path) -> dict[int, np.ndarray]:
    """The frames the tests crop from, by index: (272, 640, 3) uint8 BGR."""
    wanted = {*PARKED_BIKE_FRAMES, CAR[0], TRUCK_ROOF[0]}
    cap = cv2.VideoCapture(str(bikes_path))
    frames: dict[int, np.ndarray] = {}
    for index in range(max(wanted) + 1):
        ok, frame = cap.read()
        assert ok, f"bikes.mp4 ended at frame {index}"
        if index in wanted:
            frames[index] = frame
    cap.release()
    return frames


def jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    """JPEG-encode a BGR crop, as the edge does."""
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.fixture(scope="session")
def crops(bikes_frames) -> dict[str, bytes]:
    """JPEG crops: ``bike<frame>`` of the parked bicycle, ``car`` and ``roof`` (other objects)."""
    out = {f"bike{i}": jpeg(bikes_frames[i][PARKED_BIKE]) for i in PARKED_BIKE_FRAMES}
    out["car"] = jpeg(bikes_frames[CAR[0]][CAR[1:]])
    out["roof"] = jpeg(bikes_frames[TRUCK_ROOF[0]][TRUCK_ROOF[1:]])
    return out


@pytest.fixture(scope="session")
def demo_raw() -> dict:
    """configs/demo.yaml as a plain dict (no interpolation needed for the center's keys)."""
    return demo_data()


@pytest.fixture(scope="session")
def demo_recognizer(demo_raw):
    """The demo's validated recognizer config (MobileNetV2 embedder, split in 2 stages)."""
    return Deployment.model_validate(demo_raw).recognizers["mobilenetv2-embedder"]


@pytest.fixture(scope="session")
def embedder(demo_recognizer, embedder_weights):
    """(unsplit model, [stage0, stage1]) of the real embedder, CPU, eval mode; split once per session."""
    assert Path(embedder_weights).is_file()
    model = build_model(demo_recognizer)
    stages = split_model(model, demo_recognizer.split_points, torch.zeros(2, 3, *demo_recognizer.input_hw))
    return model, stages


def serve_rois(
    deployment: Deployment, payloads: dict[str, bytes], roi: Callable[[str], bytes], *,
    model_dir: str | None = None, reports: list[dict] | None = None, timeout_s: float = 120.0,
) -> dict[str, wire.Message]:
    """Play the broker for ``worker-1``: wait for its ``Ready``, send each payload under the ROI header
    ``roi(roi_id)``, collect one answer (``Result`` or ``Drop``) per ROI within ``timeout_s``, stop the worker.

    ``reports`` receives the worker's snapshots. Returns the answers by ROI id (missing ones: not answered in time).
    """
    router = make_socket(zmq.Context.instance(), zmq.ROUTER)
    router.bind(deployment.brokers["broker-1"].endpoint("backend", bind=True))
    stop = threading.Event()
    report = reports.append if reports is not None else None
    settings = WorkerSettings.from_deployment(deployment, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop, report, model_dir), daemon=True)
    thread.start()
    answers: dict[str, wire.Message] = {}
    deadline = time.monotonic() + timeout_s
    try:
        identity = None
        while identity is None and router.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
            routing, header, _ = wire.split_message(router.recv_multipart(), 1)
            identity = routing[0] if isinstance(header, wire.Ready) else None
        assert identity is not None, "no Ready from the worker"
        for roi_id, payload in payloads.items():
            router.send_multipart([identity, roi(roi_id), payload])
        while len(answers) < len(payloads) and router.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
            _, header, _ = wire.split_message(router.recv_multipart(), 1)
            if isinstance(header, (wire.Result, wire.Drop)):
                answers[header.roi_id] = header
    finally:
        stop.set()
        thread.join(timeout=30)
        router.close()
    assert not thread.is_alive()
    return answers

"""The edge's preview endpoint over real HTTP (issue 20, items 2 and 3): token-gated, read-only, a preview
only after someone asked for one, camera states with their reasons, and no camera credentials anywhere."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import cv2
import numpy as np
import pytest
import yaml

from tests.demo import demo_data
from tests.edge.privacy.frames import outgoing
from vcascade.core.config import load_config
from vcascade.core.detections import Detections
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.preview.server import serve_previews
from vcascade.edge.capture.source import CameraReader

TOKEN = "preview-token-0123456789"
SECRET = "s3cret-pass"


@pytest.fixture
def edge(tmp_path, free_port, bikes_path):
    """A running preview endpoint of edge-1 with two real camera readers: ``street-1`` (bikes.mp4, not started)
    and ``door`` (an RTSP camera with credentials on a port where nothing listens, started)."""
    data = demo_data()
    data["edges"]["edge-1"].update(preview_port=free_port())
    data["ui"] = {"token": TOKEN}
    dead_port = free_port()
    data["cameras"] = {
        "street-1": {"url": str(bikes_path), "edge": "edge-1"},
        "door": {"url": f"rtsp://admin:{SECRET}@127.0.0.1:{dead_port}/cam", "edge": "edge-1",
                 "open_timeout_s": 1, "backoff_initial_s": 5, "backoff_max_s": 5},
    }  # fmt: skip
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)
    slots, stop = FrameSlots(), threading.Event()
    readers = [CameraReader("edge-1", name, dep.cameras[name], slots, stop) for name in ("street-1", "door")]
    readers[1].start()
    hub = PreviewHub(dep.ui, ["person"], IdentityCache("edge-1"))
    server = serve_previews(EdgeSettings.from_deployment(dep, "edge-1"), hub, lambda: readers)
    yield dep, hub, server.server_address[1]
    server.shutdown()
    stop.set()
    readers[1].join(timeout=10)


def get(port: int, path: str, token: str | None = TOKEN, method: str = "GET"):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read(), answer.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def test_a_request_without_the_token_or_with_another_is_refused(edge):
    _, _, port = edge
    assert get(port, "/cameras", token=None)[0] == 401
    assert get(port, "/cameras", token="wrong-token-0123456789")[0] == 401
    assert get(port, "/cameras")[0] == 200
    assert get(port, "/cameras", method="POST")[0] == 405  # read-only, token or not


def test_a_preview_exists_only_after_someone_asked_for_it(edge, bikes_path):
    _, hub, port = edge
    assert not hub.due("street-1", time.monotonic())
    assert get(port, "/preview/street-1.jpg")[0] == 204  # asked: the lease starts, no frame yet
    assert get(port, "/preview/nowhere.jpg")[0] == 404
    now = time.monotonic()
    assert hub.due("street-1", now)
    ok, image = cv2.VideoCapture(str(bikes_path)).read()
    assert ok
    frame = Frame("street-1", 5, image, 200.0, time.perf_counter(), time.time() * 1000)
    hub.offer(outgoing(frame), Detections(np.array([[10, 10, 80, 90]]), np.array([0.8]), np.array([0]), np.array([1])), now)
    status, body, headers = get(port, "/preview/street-1.jpg")
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    assert headers["X-Frame-Seq"] == "5" and headers["X-Boxes"] == "[[10,10,80,90]]"


def test_camera_states_carry_the_reason_and_never_the_credentials(edge):
    _, _, port = edge
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, body, _ = get(port, "/cameras")
        door = yaml.safe_load(body)["cameras"]["door"]
        if door["state"] not in ("connecting",):
            break
        time.sleep(0.2)
    assert status == 200 and door["state"] in ("backing_off", "stalled"), door
    assert door["reason"] and door["reason"] != "start" and door["detail"] and door["live"] is True
    assert SECRET not in body.decode() and "admin" not in body.decode()
    assert get(port, "/recent/door")[0] == 200 and SECRET not in get(port, "/recent/door")[1].decode()

"""The pieces of runtime camera changes that need no process: the control protocol's messages, the validation
of an added camera, the frame slots forgetting a removed camera, and the config checks of the control socket.
(The whole flow over real processes: tests/e2e/test_runtime_cameras.py.)"""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
import numpy as np
import pytest
import yaml

from tests.demo import demo_data
from vcascade.core.protocol.bounded_decode import MalformedMessage
from vcascade.core.config import ConfigError, load_config
from vcascade.core.protocol.control import (
    CameraAdd,
    CameraList,
    CameraRemove,
    Reply,
    decode_reply,
    decode_request,
    encode,
)
from vcascade.edge.camera_set import CameraChangeError
from vcascade.edge.control import camera_config
from vcascade.edge.capture.frames import Frame, FrameSlots

REPO = Path(__file__).resolve().parents[2]


def test_requests_and_replies_round_trip_and_malformed_bytes_are_refused():
    for message in (CameraAdd(name="c", camera={"url": "x.mp4", "loop": True}), CameraRemove(name="c"), CameraList()):
        assert decode_request(encode(message)) == message
    reply = Reply(ok=True, cameras={"c": {"sent": 3, "drops": {"timeout": 1}}})
    assert decode_reply(encode(reply)) == reply
    for bad in (b"\x93garbage", encode(Reply(ok=True)), msgspec.msgpack.encode({"op": "camera_drop", "name": "c"}),
                msgspec.msgpack.encode({"op": "camera_remove", "name": "c", "extra": 1})):
        with pytest.raises(MalformedMessage):
            decode_request(bad)


def test_an_added_camera_is_validated_like_the_files_cameras():
    cfg = camera_config("edge-1", "gate-3", {"url": "rtsp://10.0.0.7/s", "detect_fps": 5})
    assert cfg.edge == "edge-1" and cfg.detect_fps == 5
    with pytest.raises(CameraChangeError, match="detect_fps"):
        camera_config("edge-1", "gate-3", {"url": "rtsp://10.0.0.7/s", "detect_fps": -1})
    with pytest.raises(CameraChangeError, match="url"):
        camera_config("edge-1", "gate-3", {})
    with pytest.raises(CameraChangeError, match="but this is edge"):
        camera_config("edge-1", "gate-3", {"url": "x.mp4", "edge": "edge-2"})
    with pytest.raises(CameraChangeError, match="camera name"):
        camera_config("edge-1", "gate 3/../x", {"url": "x.mp4"})


def test_credentials_in_a_refused_cameras_url_are_redacted():
    with pytest.raises(CameraChangeError) as info:
        camera_config("edge-1", "gate-3", {"url": "rtsp://admin:hunter2@10.0.0.7/s", "loop": "sometimes"})
    assert "hunter2" not in str(info.value) and "loop" in str(info.value)


def _frame(camera: str, seq: int) -> Frame:
    return Frame(camera, seq, np.zeros((4, 4, 3), np.uint8), seq * 40.0, 0.0, 0.0)


def test_frame_slots_forget_a_removed_camera_and_keep_serving_the_others():
    slots, stop = FrameSlots(), threading.Event()
    for camera in ("a", "b", "c"):
        slots.add_camera(camera, "every_frame", depth=4)
        slots.put(_frame(camera, 0), stop)
    slots.put(_frame("b", 1), stop)
    assert slots.queued("b") == 2
    assert slots.remove_camera("b") == 2  # queued frames of a removed camera are discarded, and counted
    assert slots.queued("b") == 0 and "b" not in slots.skipped
    assert sorted(f.camera for f in slots.take_many(8, timeout_s=1.0)) == ["a", "c"]
    for camera in ("a", "c"):
        slots.close(camera)
    assert slots.finished()


def _demo(tmp_path: Path, **edge) -> Path:
    data = demo_data()
    data["edges"]["edge-1"].update(edge)
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_control_port_is_checked_like_the_other_ports(tmp_path):
    with pytest.raises(ConfigError, match="metrics_port = 9102: expected a port not already used by edges.edge-1.control_port"):
        load_config(_demo(tmp_path, control_port=9102))
    with pytest.raises(ConfigError, match=r"edges.edge-1.bind = '\*': expected a loopback address"):
        load_config(_demo(tmp_path, control_port=5571, bind="*"))
    edge = load_config(_demo(tmp_path, control_port=5571)).edges["edge-1"]
    assert edge.control_endpoint() == "tcp://127.0.0.1:5571"
    assert load_config(_demo(tmp_path, bind="*")).edges["edge-1"].control_port is None  # no socket, no check

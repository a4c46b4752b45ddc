"""A camera whose face redaction cannot run does not start: its reader goes straight to ``failed`` with the
reason ``privacy_model_missing`` and reads nothing, and not one ROI of it is sent (real detector, tracker, policy,
link and reader; the link is not started)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from tests.demo import demo_data
from vcascade.core.config import Deployment
from vcascade.core.detections import Detections
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.camera_set import CameraSet
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.node import EdgeNode
from vcascade.core.schema.privacy import PrivacyConfig
from vcascade.edge.privacy.model_file import PrivacyModels
from vcascade.edge.process import load_detector
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack

EDGE, CAMERA = "edge-1", "street-1"


@pytest.fixture
def refused(models_dir, free_port, tmp_path, bikes_path):
    raw = demo_data()
    del raw["cameras"]["street-2"]
    raw["cameras"][CAMERA]["url"] = str(bikes_path)
    raw["cameras"][CAMERA]["privacy"] = {"faces": {"model": "centerface.onnx"}}
    for broker in raw["brokers"].values():
        broker["frontend_port"], broker["backend_port"], broker["metrics_port"] = free_port(), free_port(), free_port()
    dep = Deployment.model_validate(raw)
    detector, _ = load_detector(dep.edges[EDGE], models_dir)
    ctx = zmq.Context()
    identities = IdentityCache(EDGE)
    settings = EdgeSettings.from_deployment(dep, EDGE)
    link = BrokerLink(settings, ctx, WayBack(OutputLines([]), identities))
    empty = tmp_path / "no-models"
    empty.mkdir()
    yield EdgeNode(settings, detector, link, identities, privacy_models=PrivacyModels(empty)), dep.cameras[CAMERA]
    ctx.destroy(linger=0)


def test_missing_face_model_refuses_the_camera(refused):
    node, cam_cfg = refused
    fault = node.refusal(CAMERA)
    assert fault is not None and fault.reason == "privacy_model_missing"
    assert "face model centerface.onnx not found" in fault.detail and "fetch_models --faces" in fault.detail
    slots = FrameSlots()
    reader = CameraSet(EDGE, slots, node).start(CAMERA, cam_cfg)
    reader.join(10)
    assert reader.state == "failed" and reader.reason == "privacy_model_missing" and reader.frames == 0
    assert "privacy.faces.model" in reader.error
    assert slots.take(0.1) is None


def test_a_refused_camera_sends_nothing(refused):
    node, _ = refused
    person = Detections(np.array([[10, 10, 60, 90]], np.float32), np.array([0.9]), np.array([0]))
    image = np.full((272, 640, 3), 90, np.uint8)
    for seq in range(3):
        now_s = time.perf_counter()
        assert node.handle_detections(Frame(CAMERA, seq, image, 40.0 * seq, now_s, 1.7e12), person, now_s, now_s) == 0
    assert node.link.tally_copy()[CAMERA].sent == 0


def test_missing_text_model_refuses_the_camera(refused):
    node, cam_cfg = refused
    text_only = cam_cfg.model_copy(update={"privacy": PrivacyConfig(text={"model": "no-such-text-model.onnx"})})
    node.add_camera(CAMERA, text_only)
    fault = node.refusal(CAMERA)
    assert fault is not None and fault.reason == "privacy_model_missing"
    assert fault.detail.startswith("privacy.text.model: text model no-such-text-model.onnx not found")
    assert "fetch_models --text" in fault.detail

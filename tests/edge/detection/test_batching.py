"""Several cameras per edge share one detector session: frames of different cameras go in one batched run."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq

from tests.demo import demo_data
from vcascade.core.config import Deployment
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.detection import Yolov8Detector
from vcascade.edge.detection.pool import detect_frames
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.node import EdgeNode
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack

REPO = Path(__file__).resolve().parents[3]
S = 64
pytestmark = pytest.mark.filterwarnings("ignore:.*(legacy TorchScript-based ONNX export|feature will be removed)")


def _frame(camera: str, seq: int, hw=(48, 80)) -> Frame:
    return Frame(camera, seq, np.full((*hw, 3), 90, np.uint8), seq * 40.0, 0.0, 0.0)


def test_take_many_takes_at_most_one_frame_per_camera_round_robin():
    slots, stop = FrameSlots(), threading.Event()
    for cam in ("a", "b", "c"):
        slots.add_camera(cam, "every_frame", depth=4)
    for seq in range(2):
        for cam in ("a", "b", "c"):
            slots.put(_frame(cam, seq), stop)
    first = slots.take_many(8, timeout_s=1.0)
    assert [(f.camera, f.seq) for f in first] == [("a", 0), ("b", 0), ("c", 0)]
    assert len(slots.take_many(2, timeout_s=1.0)) == 2  # capped at max_frames
    assert [f.camera for f in slots.take_many(8, timeout_s=1.0)] == ["c"]  # what is ready now, no waiting for more
    assert slots.take_many(8, timeout_s=0.05) == []


class EmptyV8(torch.nn.Module):
    """A YOLOv8-layout head ([B, 4 + 80, 8]) that never detects anything: all scores 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((x.shape[0], 84, 8)) * x[:, :1, 0, :1]


@pytest.fixture
def dynamic_detector(tmp_path) -> Yolov8Detector:
    path = tmp_path / "empty_v8.onnx"
    torch.onnx.export(
        EmptyV8().eval(), (torch.zeros(2, 3, S, S),), str(path), input_names=["images"], output_names=["output0"],
        opset_version=17, dynamo=False, dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
    )
    return Yolov8Detector(path, input_size=S, score_threshold=0.3, nms_iou=0.45, class_ids=None, max_batch=8)


@pytest.fixture
def node(dynamic_detector, free_port):
    raw = demo_data()
    for broker in raw["brokers"].values():
        broker["frontend_port"], broker["backend_port"], broker["metrics_port"] = free_port(), free_port(), free_port()
    dep = Deployment.model_validate(raw)
    edge = next(iter(dep.edges))
    ctx = zmq.Context()
    identities = IdentityCache(edge)
    settings = EdgeSettings.from_deployment(dep, edge)
    link = BrokerLink(settings, ctx, WayBack(OutputLines([]), identities))  # never started: nothing is sent
    yield EdgeNode(settings, dynamic_detector, link, identities), list(dep.cameras_of(edge))
    ctx.destroy(linger=0)


def test_frames_of_several_cameras_share_one_session_run(node):
    edge_node, cameras = node
    assert edge_node.detector.frames_per_run == 8
    frames = [_frame(cam, 0, hw) for cam, hw in zip(cameras, [(48, 80), (100, 30)])]
    assert edge_node.handle(detect_frames(edge_node.detector, frames)) == 0
    assert edge_node.detector.session_runs == 1


def test_a_bad_frame_is_skipped_and_the_others_are_still_detected(node):
    edge_node, cameras = node
    bad = Frame(cameras[0], 0, np.zeros((4, 4, 3), np.float32), 0.0, 0.0, 0.0)  # not uint8: the detector refuses it
    good = _frame(cameras[1], 0)
    assert edge_node.handle(detect_frames(edge_node.detector, [bad, good])) == 0
    assert edge_node.detector.session_runs == 1  # the good frame alone, after the batch was refused

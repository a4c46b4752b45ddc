"""EdgeNode after detection: the ROI policy's selection becomes submitted ROIs, suppressed counts per reason and
``tracked`` lines (real detector, tracker, policy and broker link; the link is not started, so nothing leaves)."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
import zmq
from prometheus_client import REGISTRY

from tests.demo import demo_data
from vcascade.core.config import Deployment, UiConfig
from vcascade.core.detections import Detections
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.capture.frames import Frame
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.node import EdgeNode
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.process import load_detector
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.selection.roi_selection import SUPPRESS_REASONS
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import Tracked, WayBack

EDGE, CAMERA = "edge-1", "street-1"


@pytest.fixture
def node(models_dir, free_port):
    raw = demo_data()
    del raw["cameras"]["street-2"]
    for broker in raw["brokers"].values():
        broker["frontend_port"], broker["backend_port"], broker["metrics_port"] = free_port(), free_port(), free_port()
    dep = Deployment.model_validate(raw)
    detector, _ = load_detector(dep.edges[EDGE], models_dir)
    ctx = zmq.Context()
    identities = IdentityCache(EDGE)
    settings = EdgeSettings.from_deployment(dep, EDGE)
    link = BrokerLink(settings, ctx, WayBack(OutputLines([]), identities))  # never started: events wait in its outbox
    yield EdgeNode(settings, detector, link, identities)
    ctx.destroy(linger=0)


def _suppressed() -> dict[str, float]:
    labels = {"edge": EDGE, "camera": CAMERA}
    return {
        reason: REGISTRY.get_sample_value("vcascade_edge_rois_suppressed_total", {**labels, "reason": reason}) or 0.0
        for reason in SUPPRESS_REASONS
    }


def _tracked_lines() -> float:
    return REGISTRY.get_sample_value("vcascade_edge_tracked_lines_total", {"edge": EDGE, "camera": CAMERA}) or 0.0


def test_a_track_is_sent_once_and_the_rest_is_counted_per_reason_and_followed(node):
    """A wide and a narrow person over three frames (demo policy: ``track``, ``min_size_px`` 24)."""
    detections = Detections(np.array([[10, 10, 60, 90], [100, 10, 110, 90]], np.float32), np.array([0.9, 0.9]),
                            np.array([0, 0]))
    image = np.zeros((480, 640, 3), np.uint8)
    suppressed_before, lines_before = _suppressed(), _tracked_lines()
    submitted = []
    for seq in range(3):
        now_s = time.perf_counter()
        frame = Frame(CAMERA, seq, image, 40.0 * seq, now_s, 1.7e12)
        submitted.append(node.handle_detections(frame, detections, now_s, now_s))
    assert submitted == [0, 1, 0]  # tentative on its first frame, sent on its second (first), then sent_recently
    counted = {reason: n - suppressed_before[reason] for reason, n in _suppressed().items()}
    assert counted == {"class": 0, "size": 3, "score": 0, "no_route": 0, "tentative": 1, "sent_recently": 1, "backlog": 0}
    assert _tracked_lines() - lines_before == 2  # the tentative and the sent_recently rows; never a size-filtered one
    tracked = [event for event in node.link._outbox if isinstance(event, Tracked)]
    assert [(event.frame_seq, event.class_name, event.identity) for event in tracked] == [(0, "person", None), (2, "person", None)]
    assert node.link.tally_copy()[CAMERA].sent == 1


def test_previews_are_encoded_only_for_a_watched_camera_at_its_rate(node):
    """The preview path of the node (issue 20, item 2): nothing is drawn for an unwatched camera; once watched, at
    most ``ui.preview_fps`` previews per second of frames, with the tracked boxes."""
    node.preview = PreviewHub(UiConfig(preview_fps=0.5), node.detector.class_names, node.identities)
    detections = Detections(np.array([[10, 10, 60, 90]], np.float32), np.array([0.9]), np.array([0]))
    image = np.full((480, 640, 3), 90, np.uint8)

    def frames(first: int, count: int) -> None:
        for seq in range(first, first + count):
            now_s = time.perf_counter()
            node.handle_detections(Frame(CAMERA, seq, image, 40.0 * seq, now_s, 1.7e12), detections, now_s, now_s)

    frames(0, 10)
    assert node.preview.encoded == {} and node.preview.latest(CAMERA) is None
    node.preview.watch(CAMERA)
    frames(10, 10)  # well within the 2 s between previews, even on a loaded machine: one preview
    assert node.preview.encoded == {CAMERA: 1}
    latest = node.preview.latest(CAMERA)
    assert latest.frame_seq == 10 and len(latest.boxes_xyxy_px) == 1  # tracked from frame 0: confirmed by now


def test_each_route_gets_its_crop_size(models_dir, free_port):
    """The demo's two routes with the edge shrinking crops to 48 px and the text route keeping them as cut: the
    queued person crop is 48 px on its longer side, the car crop keeps its 200x120 px."""
    raw = demo_data(both_recognizers=True)
    del raw["cameras"]["street-2"]
    roi = raw["edges"][EDGE]["roi"]
    roi["crop_max_side_px"] = 48
    roi["padding_px"] = 0
    roi["routes"][0]["crop_max_side_px"] = 0  # ppocr-text: cars, buses, trucks as cut
    for broker in raw["brokers"].values():
        broker["frontend_port"], broker["backend_port"], broker["metrics_port"] = free_port(), free_port(), free_port()
    dep = Deployment.model_validate(raw)
    detector, _ = load_detector(dep.edges[EDGE], models_dir)
    ctx = zmq.Context()
    try:
        identities = IdentityCache(EDGE)
        settings = EdgeSettings.from_deployment(dep, EDGE)
        node = EdgeNode(settings, detector, BrokerLink(settings, ctx, WayBack(OutputLines([]), identities)), identities)
        names = list(detector.class_names)
        classes = np.array([names.index("person"), names.index("car")])
        detections = Detections(np.array([[10, 10, 90, 170], [300, 100, 500, 220]], np.float32),
                                np.array([0.9, 0.9]), classes)  # fmt: skip
        image = np.random.default_rng(0).integers(0, 255, (480, 640, 3), np.uint8)
        for seq in range(2):  # tentative, then sent
            now_s = time.perf_counter()
            node.handle_detections(Frame(CAMERA, seq, image, 40.0 * seq, now_s, 1.7e12), detections, now_s, now_s)
        sizes = {pending.roi.recognizer: cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR).shape[:2]
                 for pending, payload in node.link._queue}  # fmt: skip
        assert sizes == {"mobilenetv2-embedder": (48, 24), "ppocr-text": (120, 200)}
        assert [p.roi.crop_xyxy for p, _ in node.link._queue] == [(10, 10, 90, 170), (300, 100, 500, 220)]
    finally:
        ctx.destroy(linger=0)

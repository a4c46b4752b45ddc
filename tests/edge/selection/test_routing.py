"""Routing at the edge (pure): which recognizer each detection's ROI is for, and the ROI policy's no_route."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.demo import demo_data
from vcascade.core.coco import COCO_CLASSES
from vcascade.core.config import Deployment, RoiPolicyConfig, RouteConfig
from vcascade.core.detections import Detections
from vcascade.edge.selection.roi_selection import FOLLOWED_REASONS, SUPPRESS_REASONS
from vcascade.edge.selection.roi_policy import ANY_RECOGNIZER, ClassRouter, RoiPolicy, route_crop_sides

PERSON, BICYCLE, CAR, DOG = (COCO_CLASSES.index(n) for n in ("person", "bicycle", "car", "dog"))
DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"
FRAME_HW = (480, 640)
ROUTES = [
    RouteConfig(recognizer="plate-text", classes=["car", "bus", "truck"]),
    RouteConfig(recognizer="embedder", classes=["person", "bicycle"]),
]


def dets(*rows):
    """rows: (class_id, track_id); boxes 40x40 px, score 0.9."""
    n = len(rows)
    xyxy = np.tile(np.array([10.0, 10.0, 50.0, 50.0]), (n, 1))
    return Detections(xyxy, np.full(n, 0.9), np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))


def sent_and_suppressed(policy, detections, ts_ms):
    """The policy's selection as (track id, reason, recognizer) of each sent row and (track id, reason) of each
    suppressed row, in frame order."""
    selection = policy.decide(detections, ts_ms, FRAME_HW)
    sent = zip(selection.detections.track_id.tolist(), selection.send_reason.tolist(), selection.recognizer.tolist())
    suppressed = zip(selection.suppressed.track_id.tolist(), selection.suppress_reason.tolist())
    return list(sent), list(suppressed)


def test_first_matching_route_wins_and_unrouted_classes_have_none():
    router = ClassRouter([*ROUTES, RouteConfig(recognizer="other", classes=["car", "dog"])], COCO_CLASSES)
    assert router.route(CAR) == "plate-text"  # listed again later: the first route wins
    assert router.route(PERSON) == "embedder"
    assert router.route(DOG) == "other"
    assert router.route(COCO_CLASSES.index("cat")) is None


def test_a_route_without_classes_takes_every_class_left():
    router = ClassRouter([ROUTES[0], RouteConfig(recognizer="embedder")], COCO_CLASSES)
    assert router.route(CAR) == "plate-text"
    assert {router.route(c) for c in range(len(COCO_CLASSES)) if c != CAR} >= {"embedder"}


def test_no_routes_means_any_recognizer():
    router = ClassRouter([], COCO_CLASSES)
    assert router.route(DOG, track_id=3) == ANY_RECOGNIZER == ""


def test_a_track_keeps_the_recognizer_of_its_first_routed_detection():
    router = ClassRouter(ROUTES, COCO_CLASSES)
    assert router.route(PERSON, track_id=7) == "embedder"
    assert router.route(CAR, track_id=7) == "embedder"  # the detector changed its mind; the track did not
    assert router.route(CAR, track_id=8) == "plate-text"
    assert router.route(CAR, track_id=-1) == "plate-text"  # untracked: by class, nothing remembered
    assert router.tracks_pinned == 2
    router.retain({8})
    assert router.tracks_pinned == 1
    assert router.route(CAR, track_id=7) == "plate-text"  # track 7 expired: its pin is forgotten


def test_an_unrouted_class_does_not_pin_the_track():
    router = ClassRouter(ROUTES, COCO_CLASSES)
    assert router.route(DOG, track_id=4) is None
    assert router.route(PERSON, track_id=4) == "embedder"


def test_unknown_class_name_fails_at_start():
    with pytest.raises(ValueError, match="'car'"):
        ClassRouter(ROUTES, ["person", "bicycle"])  # a custom model without cars (class-names file)


def test_policy_suppresses_unrouted_classes_as_no_route_and_names_the_recognizer():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=4, router=ClassRouter(ROUTES, COCO_CLASSES))
    got = sent_and_suppressed(policy, dets((PERSON, 1), (CAR, 2), (DOG, 3)), 0.0)
    assert got == ([(1, "first", "embedder"), (2, "first", "plate-text")], [(3, "no_route")])
    assert "no_route" in SUPPRESS_REASONS and "no_route" not in FOLLOWED_REASONS  # not an object of interest
    got = sent_and_suppressed(policy, dets((CAR, 1), (DOG, 3)), 40.0)
    assert got == ([], [(1, "sent_recently"), (3, "no_route")])
    assert policy.router.route(CAR, track_id=1) == "embedder"  # the suppressed row's track kept its recognizer
    policy.retain({2})
    assert policy.router.tracks_pinned == 1


def test_filters_come_before_routing():
    policy = RoiPolicy(
        RoiPolicyConfig(classes=["person"]), min_size_px=16, padding_px=4, router=ClassRouter(ROUTES, COCO_CLASSES)
    )
    assert sent_and_suppressed(policy, dets((CAR, 1), (DOG, 2)), 0.0) == ([], [(1, "class"), (2, "class")])


def test_without_a_router_every_roi_is_for_any_recognizer():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=4)
    assert sent_and_suppressed(policy, dets((DOG, 1)), 0.0) == ([(1, "first", "")], [])


def _deployment(edge_routes=None, camera_routes=None, recognizers=("embedder",)) -> Deployment:
    data = demo_data()
    embedder = data["recognizers"].pop("mobilenetv2-embedder")
    data["recognizers"] = {name: embedder for name in recognizers}
    worker = data["workers"].pop("worker-1")
    data["workers"] = {
        f"w-{name}": {**worker, "recognizer": name, "metrics_port": 9200 + i} for i, name in enumerate(recognizers)
    }
    if edge_routes is not None:
        data["edges"]["edge-1"]["roi"]["routes"] = edge_routes
    if camera_routes is not None:
        data["cameras"]["street-2"]["routes"] = camera_routes
    return Deployment.model_validate(data)


def test_routes_of_a_camera_default_to_the_single_served_recognizer():
    dep = _deployment()
    assert dep.recognizers_served("edge-1") == ["embedder"]
    assert ClassRouter(dep.routes_of("street-1"), COCO_CLASSES).route(DOG) == "embedder"


def test_camera_routes_override_the_edge_routes():
    dep = _deployment(
        edge_routes=[{"recognizer": "a", "classes": ["person"]}],
        camera_routes=[{"recognizer": "b"}],
        recognizers=("a", "b"),
    )
    assert ClassRouter(dep.routes_of("street-1"), COCO_CLASSES).route(CAR) is None
    assert ClassRouter(dep.routes_of("street-2"), COCO_CLASSES).route(CAR) == "b"


def test_an_edge_whose_brokers_have_no_worker_routes_to_the_files_only_recognizer():
    """Regression: with no worker on its brokers, an edge served no recognizer and suppressed every detection
    as ``no_route``; its ROIs must reach the broker and end as counted ``no_worker`` drops instead."""
    data = demo_data()
    data["brokers"]["broker-2"] = {**data["brokers"]["broker-1"], "frontend_port": 5565, "backend_port": 5566,
                                   "metrics_port": 9112}
    data["edges"]["edge-1"]["brokers"] = ["broker-2"]
    dep = Deployment.model_validate(data)
    assert dep.recognizers_served("edge-1") == []
    assert ClassRouter(dep.routes_of("street-1"), COCO_CLASSES).route(DOG) == "mobilenetv2-embedder"


def test_route_crop_sides_take_each_routes_size_or_the_edges():
    routes = [RouteConfig(recognizer="text", classes=["car"], crop_max_side_px=0),
              RouteConfig(recognizer="people", classes=["person"]),
              RouteConfig(recognizer="reid", classes=["car"], crop_max_side_px=64),
              RouteConfig(recognizer="reid", classes=["bus"], crop_max_side_px=128),
              RouteConfig(recognizer="any", classes=["truck"], crop_max_side_px=96),
              RouteConfig(recognizer="any", crop_max_side_px=0)]  # fmt: skip
    assert route_crop_sides(routes, 160) == {"text": 0, "people": 160, "reid": 128, "any": 0}
    assert route_crop_sides([], 160) == {}

"""Motion-gated detection (edge.detection.motion, issue 32): on real footage the gate detects moving frames, keeps
still ones from the detector until ``max_gap_s``, and the edge carries tracks over the still frames."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
from prometheus_client import REGISTRY

from tests.edge.test_node import CAMERA, EDGE, node  # noqa: F401  (fixture)
from vcascade.core.config import MotionConfig, YoloxDetectorConfig
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.motion import MotionGate, MotionGates
from vcascade.edge.detection.pool import DetectorPool

FRAME_MS = 40.0


@pytest.fixture(scope="module")
def footage(bikes_path) -> list[np.ndarray]:
    """The first 50 frames (2 s) of the sample street clip: cyclists and a car move through it."""
    cap = cv2.VideoCapture(str(bikes_path))
    images = [cap.read()[1] for _ in range(50)]
    cap.release()
    assert all(image is not None for image in images)
    return images


def _recompressed(image: np.ndarray, quality: int) -> np.ndarray:
    """The same scene with fresh JPEG compression noise (what a still camera's successive frames look like)."""
    return cv2.imdecode(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])[1], cv2.IMREAD_COLOR)


def test_a_still_scene_is_detected_once_per_max_gap_and_compression_noise_is_not_motion(footage):
    gate = MotionGate(MotionConfig(max_gap_s=1.0))
    still = footage[0]
    decisions = [gate.needs_detection(_recompressed(still, 70 + i % 25), i * FRAME_MS) for i in range(75)]
    assert decisions[0]  # no reference yet
    assert [i for i, d in enumerate(decisions) if d] == [0, 25, 50]  # then only when 1 s of stream time has passed
    assert gate.last_changed < gate.cfg.min_area


def test_moving_street_frames_are_detected(footage):
    gate = MotionGate(MotionConfig(max_gap_s=10.0))
    decisions = [gate.needs_detection(image, i * FRAME_MS) for i, image in enumerate(footage)]
    # cyclists move a few pixels a frame: measured against the last detected frame, motion adds up until it counts
    assert sum(decisions) >= 0.5 * len(footage), decisions


def test_a_clock_going_back_or_a_new_size_forces_a_detection(footage):
    gate = MotionGate(MotionConfig(max_gap_s=10.0))
    assert gate.needs_detection(footage[0], 1000.0)
    assert not gate.needs_detection(footage[0], 1040.0)
    assert gate.needs_detection(footage[0], 0.0)  # loop or reconnect: the stream's clock restarted
    assert gate.needs_detection(cv2.resize(footage[0], (320, 136)), 40.0)
    assert gate.needs_detection(footage[0], float("nan"))


def _skipped(camera: str) -> float:
    labels = {"edge": EDGE, "camera": camera, "reason": "no_motion"}
    return REGISTRY.get_sample_value("vcascade_edge_detections_skipped_total", labels) or 0.0


def test_the_pool_detects_only_moving_frames_and_hands_still_ones_back_in_order(footage, yolox_path):
    detector = build_detector(YoloxDetectorConfig(), yolox_path)
    skipped = []
    gates = MotionGates(skipped.append)
    gates.add("gated", MotionConfig(max_gap_s=100.0))
    gates.add("plain", None)
    slots = FrameSlots()
    frames = []
    for seq in range(4):  # a still scene on both cameras, the moving street on the gated one after that
        frames += [Frame(cam, seq, footage[0], seq * FRAME_MS, 0.0, 0.0) for cam in ("gated", "plain")]
    frames.append(Frame("gated", 4, footage[30], 4 * FRAME_MS, 0.0, 0.0))
    for camera in ("gated", "plain"):
        slots.add_camera(camera, "every_frame", depth=len(frames))
    for frame in frames:
        slots.put(frame, threading.Event())
    for camera in ("gated", "plain"):
        slots.close(camera)
    pool = DetectorPool(slots, detector, 2, frames_per_run=2, gates=gates)
    pool.start()
    out = []
    try:
        while not slots.finished():
            detected = pool.next(timeout_s=30.0)
            assert detected is not None, "the pool stopped handing back frames"
            out.extend(detected)
            slots.release([d.frame for d in detected])
    finally:
        pool.stop()
    assert [(d.frame.camera, d.frame.seq) for d in out] == [(f.camera, f.seq) for f in frames]
    still = [(d.frame.camera, d.frame.seq) for d in out if d.still]
    assert still == [("gated", 1), ("gated", 2), ("gated", 3)] and skipped == ["gated"] * 3
    assert all(d.detections is not None and len(d.detections) for d in out if not d.still)


def test_tracks_keep_their_ids_over_a_still_stretch_longer_than_lost_track_s(node, footage):  # noqa: F811
    """The demo camera's ``lost_track_s`` is 1 s: 3 s of still frames (carried detections) keep every id, whereas
    the same 3 s with no tracker update at all (frames dropped before the edge) end them all."""
    image = max(footage[::10], key=lambda image: len(node.detector(image)))  # the demo keeps a few classes only
    detections = node.detector(image)
    assert len(detections) >= 1

    def run(still_frames: bool) -> tuple[set[int], set[int]]:
        node.remove_camera(CAMERA)
        node.add_camera(CAMERA, node.settings.cameras[CAMERA], open_books=False)
        cam = node._cameras[CAMERA]
        for seq in range(5):
            node.handle_detections(Frame(CAMERA, seq, image, seq * FRAME_MS, 0.0, 0.0), detections, 0.0, 0.0)
        before = cam.tracker.alive_ids()
        if still_frames:
            for seq in range(5, 80):
                node.handle_detections(Frame(CAMERA, seq, image, seq * FRAME_MS, 0.0, 0.0), None, 0.0, 0.0)
        node.handle_detections(Frame(CAMERA, 80, image, 80 * FRAME_MS, 0.0, 0.0), detections, 0.0, 0.0)
        return before, cam.tracker.alive_ids()

    before, after = run(still_frames=True)
    assert before and after == before
    assert node.camera_stats(CAMERA)["still"] == 75
    before, after = run(still_frames=False)
    assert before and not after & before


def test_the_edge_counts_each_still_frame_in_its_skip_metric(node, footage):  # noqa: F811
    node.motion.add(CAMERA, MotionConfig())
    before = _skipped(CAMERA)
    decisions = [node.motion.needs_detection(CAMERA, footage[0], i * FRAME_MS) for i in range(5)]
    assert decisions == [True, False, False, False, False]
    assert _skipped(CAMERA) - before == 4
    node.motion.remove(CAMERA)
    assert node.motion.needs_detection(CAMERA, footage[0], 6 * FRAME_MS)  # no gate: every frame is detected

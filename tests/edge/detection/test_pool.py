"""Concurrent detector runs (edge.detection.pool): results come back in take order, equal to one-by-one detection,
and a rejected frame is counted without stopping the others."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from vcascade.core.config import YoloxDetectorConfig
from vcascade.edge.detection.pool import DetectorPool, detect_frames
from vcascade.edge.detection import build_detector
from vcascade.edge.capture.frames import Frame, FrameSlots


@pytest.fixture(scope="module")
def frames(bikes_path) -> list[Frame]:
    cap = cv2.VideoCapture(str(bikes_path))
    images = [cap.read()[1] for _ in range(12)]
    cap.release()
    return [Frame(f"cam-{i % 3}", i // 3, image, i * 40.0, 0.0, 0.0) for i, image in enumerate(images)]


@pytest.fixture(scope="module")
def detector(yolox_path):
    return build_detector(YoloxDetectorConfig(classes=None), yolox_path)


def _fill(slots: FrameSlots, frames: list[Frame]) -> None:
    for camera in sorted({f.camera for f in frames}):
        slots.add_camera(camera, "every_frame", depth=len(frames))
    stop = threading.Event()
    for frame in frames:
        slots.put(frame, stop)
    for camera in sorted({f.camera for f in frames}):
        slots.close(camera)


@pytest.mark.parametrize("instances", [1, 3])
def test_pool_hands_back_every_frame_in_take_order_with_one_by_one_detections(frames, detector, instances):
    slots = FrameSlots()
    _fill(slots, frames)
    pool = DetectorPool(slots, detector, instances, frames_per_run=1)
    pool.start()
    out = []
    try:
        while not slots.finished():
            detected = pool.next(timeout_s=10.0)
            assert detected is not None, "the pool stopped handing back frames"
            out.extend(detected)
            slots.release([d.frame for d in detected])
    finally:
        pool.stop()
    # round-robin take order across cameras, and each camera's frames in sequence
    assert [(d.frame.camera, d.frame.seq) for d in out] == [(f.camera, f.seq) for f in frames]
    for d in out:
        expected = detector(d.frame.image)
        assert d.error == "" and len(d.detections) == len(expected)
        np.testing.assert_allclose(d.detections.xyxy, expected.xyxy, atol=1e-3)
        assert d.start_s <= d.end_s
    assert sum(len(d.detections) for d in out) > 0


def test_held_frames_count_as_queued_until_released(frames):
    slots = FrameSlots()
    _fill(slots, frames[:2])
    taken = slots.take_many(2, timeout_s=1.0, hold=True)
    assert len(taken) == 2 and slots.queued("cam-0") == 1 and not slots.finished()
    slots.release(taken)
    assert slots.queued("cam-0") == 0 and slots.finished()


def test_a_rejected_frame_is_reported_and_the_others_detected(frames, detector):
    bad = Frame("cam-9", 0, np.zeros((4, 4, 2), np.uint8), 0.0, 0.0, 0.0)
    busy = max(frames, key=lambda f: len(detector(f.image)))
    out = detect_frames(detector, [busy, bad])
    assert out[0].detections is not None and len(out[0].detections) > 0
    assert out[1].detections is None and out[1].error


def test_a_broken_detector_stops_the_pool_with_its_error(frames):
    class Broken:
        def detect_batch(self, images):
            raise RuntimeError("session lost")

    slots = FrameSlots()
    _fill(slots, frames[:1])
    pool = DetectorPool(slots, Broken(), 2, frames_per_run=1)
    pool.start()
    try:
        with pytest.raises(RuntimeError, match="session lost"):
            pool.next(timeout_s=5.0)
    finally:
        pool.stop()

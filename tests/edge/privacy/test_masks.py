"""Privacy masks on real frames: filled before anything sees the frame (pixels and normalised corners, boundary
pixels included), applied by the reader to every frame it hands on, and a mask outside the frames fails the
camera with the reason ``privacy_mask_outside_frame`` without handing on a single frame (and ``check --deep``
says so from the first frame)."""

from __future__ import annotations

import threading

import av
import numpy as np
import pytest

from tests.demo import demo_data
from vcascade.app.preflight import camera_problems
from vcascade.core.config import CameraConfig, Deployment, PrivacyConfig
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader
from vcascade.edge.privacy.masks import FrameMasks, MaskOutsideFrame

TRIANGLE = [[100, 20], [300, 40], [150, 200]]
FILL = (7, 200, 13)


@pytest.fixture(scope="module")
def frame(bikes_path) -> np.ndarray:
    with av.open(str(bikes_path)) as container:
        for i, decoded in enumerate(container.decode(video=0)):
            if i == 100:
                return decoded.to_ndarray(format="bgr24")
    raise AssertionError("bikes.mp4 has fewer than 101 frames")


def test_pixel_mask_fills_the_polygon_and_nothing_else(frame):
    masks = FrameMasks(PrivacyConfig(masks=[{"name": "t", "polygon": TRIANGLE}], fill_bgr=FILL))
    out = masks.apply(frame.copy())
    inside = masks.raster(*frame.shape[:2])
    assert inside[20, 100] and inside[200, 150] and inside[40, 300]  # the corners themselves are covered
    assert 0.05 < inside.mean() < 0.15  # the triangle's area, 17,000 px of 174,080
    assert (out[inside] == FILL).all()
    assert np.array_equal(out[~inside], frame[~inside])


def test_normalised_mask_scales_with_the_frame(frame):
    right_half = {"name": "right", "polygon": [[0.5, 0], [1, 0], [1, 1], [0.5, 1]]}
    masks = FrameMasks(PrivacyConfig(coordinates="normalized", masks=[right_half]))
    out = masks.apply(frame.copy())
    assert (out[:, 321:] == 0).all() and np.array_equal(out[:, :319], frame[:, :319])
    small = masks.apply(np.full((100, 50, 3), 255, np.uint8))
    assert (small[:, 26:] == 0).all() and (small[:, :24] == 255).all()


def test_pixel_mask_outside_the_frame_is_refused(frame):
    masks = FrameMasks(PrivacyConfig(masks=[{"name": "far", "polygon": [[600, 0], [700, 0], [650, 100]]}]))
    with pytest.raises(MaskOutsideFrame, match=r"privacy.masks 'far': corner \[700.0, 0.0\] outside the 640x272 frame"):
        masks.apply(frame.copy())


def test_reader_hands_on_masked_frames_only(read_all, bikes_path):
    privacy = PrivacyConfig(masks=[{"name": "t", "polygon": TRIANGLE}], fill_bgr=FILL)
    reader, frames = read_all(bikes_path, max_frames=5, privacy=privacy)
    assert reader.state == "ended" and len(frames) == 5
    inside = FrameMasks(privacy).raster(272, 640)
    for seen in frames:
        assert (seen.image[inside] == FILL).all()


def test_mask_outside_the_frame_fails_the_camera_before_any_frame(bikes_path):
    privacy = PrivacyConfig(masks=[{"name": "far", "polygon": [[600, 0], [900, 0], [650, 100]]}])
    slots = FrameSlots()
    cfg = CameraConfig(url=str(bikes_path), edge="e", privacy=privacy)
    reader = CameraReader("edge", "cam", cfg, slots, threading.Event())
    reader.start()
    reader.join(30)
    assert not reader.is_alive()
    assert reader.state == "failed" and reader.machine.reason == "privacy_mask_outside_frame"
    assert "privacy.masks 'far'" in reader.error and "outside the 640x272 frame" in reader.error
    assert slots.take(0.1) is None  # not one frame reached the detector


def test_deep_check_tests_pixel_masks_against_the_first_frame(bikes_path):
    data = demo_data()
    far = {"masks": [{"name": "far", "polygon": [[600, 0], [900, 0], [650, 100]]}]}
    data["cameras"]["street-1"].update(url=str(bikes_path), privacy=far)
    data["cameras"]["street-2"].update(url=str(bikes_path))
    problems = camera_problems(Deployment.model_validate(data), 10.0)
    assert len(problems) == 1
    assert problems[0].startswith("cameras.street-1: privacy_mask_outside_frame: ")
    assert "privacy.masks 'far': corner [900.0, 0.0] outside the 640x272 frame" in problems[0]

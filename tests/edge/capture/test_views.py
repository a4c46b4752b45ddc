"""A camera's ``view``: crop, mirror, rescale and JPEG re-encode of real frames, boxes carried along, the reader."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vcascade.core.config import CameraViewConfig, ConfigError, load_config
from vcascade.edge.capture.views import apply_view, crop_px, view_boxes

BIKE_BOX = np.array([[195.0, 40.0, 335.0, 272.0]])
"""A parked bicycle in frame 150 of bikes.mp4 (tests/center/conftest.py PARKED_BIKE), source pixels."""


@pytest.fixture(scope="module")
def frame150(bikes_path) -> np.ndarray:
    cap = cv2.VideoCapture(str(bikes_path))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 150)
    ok, image = cap.read()
    cap.release()
    assert ok
    return image


def test_no_transform_keeps_the_frame(frame150):
    assert np.array_equal(apply_view(frame150, CameraViewConfig()), frame150)


def test_crop_then_mirror_then_scale(frame150):
    view = CameraViewConfig(crop_xyxy_frac=(0.25, 0.0, 0.75, 0.5), mirror=True, scale=0.5)
    out = apply_view(frame150, view)
    assert crop_px(view, 272, 640) == (160, 0, 480, 136)
    assert out.shape == (68, 160, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
    expected = cv2.resize(frame150[0:136, 160:480][:, ::-1], (160, 68), interpolation=cv2.INTER_AREA)
    assert np.array_equal(out, expected)


def test_jpeg_reencoding_changes_pixels_but_not_the_picture(frame150):
    out = apply_view(frame150, CameraViewConfig(jpeg_quality=40))
    diff = np.abs(out.astype(np.int16) - frame150.astype(np.int16))
    assert out.shape == frame150.shape and diff.max() > 0  # not the same pixels
    assert diff.mean() < 8  # the same scene


def test_boxes_follow_the_pixels(frame150):
    """The bicycle's box carried into the view frames the same pixels as the view of the source crop."""
    view = CameraViewConfig(crop_xyxy_frac=(0.1, 0.0, 0.9, 1.0), mirror=True, scale=0.75)
    out = apply_view(frame150, view)
    (x0, y0, x1, y1), = view_boxes(BIKE_BOX, view, 272, 640).round().astype(int)
    bike_in_view = out[y0:y1, x0:x1]
    bike_from_source = cv2.resize(frame150[40:272, 195:335][:, ::-1], (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
    assert np.abs(bike_in_view.astype(np.int16) - bike_from_source.astype(np.int16)).mean() < 6


def test_a_box_outside_the_crop_has_no_area():
    view = CameraViewConfig(crop_xyxy_frac=(0.5, 0.0, 1.0, 1.0))
    (x0, y0, x1, y1), = view_boxes(np.array([[10.0, 10.0, 100.0, 100.0]]), view, 272, 640)
    assert (x1 - x0) * (y1 - y0) == 0


@pytest.mark.parametrize("box", [[0.5, 0.0, 0.4, 1.0], [0.0, 0.0, 1.2, 1.0], [-0.1, 0.0, 1.0, 1.0]])
def test_a_crop_outside_the_frame_is_refused_naming_the_key(box, tmp_path):
    text = f"""
version: 1
cameras:
  cam: {{url: bikes.mp4, edge: e, view: {{crop_xyxy_frac: {box}}}}}
edges: {{e: {{brokers: [b]}}}}
brokers: {{b: {{}}}}
"""
    (tmp_path / "d.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"cameras\.cam\.view\.crop_xyxy_frac"):
        load_config(tmp_path / "d.yaml")


def test_reader_hands_on_the_view(read_all, bikes_path):
    _, plain = read_all(bikes_path, max_frames=3)
    view = CameraViewConfig(crop_xyxy_frac=(0.0, 0.0, 0.5, 1.0), mirror=True, scale=0.5, jpeg_quality=70)
    reader, frames = read_all(bikes_path, max_frames=3, view=view)
    assert reader.state == "ended" and len(frames) == 3
    assert [f.stream_ts_ms for f in frames] == [f.stream_ts_ms for f in plain]
    for seen, source in zip(frames, plain):
        assert seen.image.shape == (136, 160, 3)
        assert np.array_equal(seen.image, apply_view(source.image, view))

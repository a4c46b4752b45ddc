"""Crops: padded, clamped to the frame, small detections skipped, JPEG round trip."""

import cv2
import numpy as np

from vcascade.core.config import RoiConfig
from vcascade.core.detections import Detections
from vcascade.edge.roi import crop_box, encode_jpeg, select_crops


def test_crop_box_pads_and_clamps():
    assert crop_box(np.array([10.2, 20.7, 50.5, 60.0]), (100, 200), 4) == (6, 16, 55, 64)
    assert crop_box(np.array([-5.0, 2.0, 198.0, 99.0]), (100, 200), 8) == (0, 0, 200, 100)


def test_select_crops_skips_small_and_views_the_frame():
    frame = np.random.default_rng(0).integers(0, 255, (100, 200, 3), dtype=np.uint8)
    dets = Detections(np.array([[10, 10, 60, 90], [100, 10, 105, 90], [150, 50, 199, 99]], np.float32),
                      np.array([0.9, 0.8, 0.7]), np.array([0, 1, 2]))
    crops = select_crops(frame, dets, RoiConfig(padding_px=2, min_size_px=16))
    assert [c.index for c in crops] == [0, 2]
    assert crops[0].crop_xyxy == (8, 8, 62, 92)
    assert np.shares_memory(crops[0].pixels, frame)
    assert crops[1].pixels.shape == (52, 52, 3)  # clamped at the frame's right and bottom edges


def test_jpeg_round_trip():
    crop = np.full((40, 30, 3), (10, 200, 90), np.uint8)
    data = encode_jpeg(crop, 90)
    assert data[:2] == b"\xff\xd8"
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == crop.shape and np.abs(decoded.astype(int) - crop).max() <= 3

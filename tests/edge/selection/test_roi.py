"""Crops and ROI headers from a selection: views of the selected rectangles, JPEG round trip, one wire.Roi per row."""

import cv2
import numpy as np

from vcascade.core.protocol import wire
from vcascade.core.detections import Detections
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.roi import crop_pixels, encode_jpeg, roi_header
from vcascade.edge.selection.roi_selection import RoiSelection


def _selection() -> RoiSelection:
    """Two sent rows (the second routed, tracked) and one suppressed, as the policy makes them."""
    sent = Detections(np.array([[10, 10, 60, 90], [150, 50, 199, 99]], np.float32), np.array([0.9, 0.7]),
                      np.array([0, 2]), np.array([-1, 12]))
    suppressed = Detections(np.array([[100, 10, 105, 90]], np.float32), np.array([0.8]), np.array([1]))
    return RoiSelection(sent, ["every_detection", "first"], ["", "plate-text"],
                        np.array([[8, 8, 62, 92], [148, 48, 200, 100]], np.int32), suppressed, ["size"])


def test_crops_are_views_of_the_selected_rectangles():
    frame = np.random.default_rng(0).integers(0, 255, (100, 200, 3), dtype=np.uint8)
    selection = _selection()
    first, second = (crop_pixels(frame, crop_xyxy) for crop_xyxy in selection.crop_xyxy)
    assert np.shares_memory(first, frame)
    assert np.array_equal(first, frame[8:92, 8:62])
    assert second.shape == (52, 52, 3)  # clamped at the frame's right and bottom edges


def test_roi_header_is_one_row_of_the_selection_with_the_frame():
    frame = Frame("street-1", 41, np.zeros((100, 200, 3), np.uint8), 1640.0, 12.5, 1.7e12)
    roi = roi_header(frame, _selection(), 1, "edge-1-abcd1234-7")
    assert roi == wire.Roi(
        roi_id="edge-1-abcd1234-7", camera="street-1", frame_seq=41, stream_ts_ms=1640.0, capture_unix_ms=1.7e12,
        xyxy=(150.0, 50.0, 199.0, 99.0), crop_xyxy=(148, 48, 200, 100), class_id=2, score=float(np.float32(0.7)),
        track_id=12, recognizer="plate-text", send_reason="first",
    )
    assert wire.decode(wire.encode(roi)) == roi  # plain Python values: the header encodes and decodes as it is


def test_jpeg_round_trip():
    crop = np.full((40, 30, 3), (10, 200, 90), np.uint8)
    data = encode_jpeg(crop, 90)
    assert data[:2] == b"\xff\xd8"
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == crop.shape and np.abs(decoded.astype(int) - crop).max() <= 3

"""Real ByteTrack on real YOLOX-nano detections of bikes.mp4: stable ids, expiry in stream time, resets."""

import cv2
import numpy as np
import pytest

from vcascade.core.config import TrackerConfig
from vcascade.core.detections import Detections
from vcascade.edge.detection import YoloxDetector
from vcascade.edge.selection.tracking import CameraTracker

FIRST, LAST = 26, 46  # a cyclist crosses the frame from about frame 30; nothing is detected before ~25


@pytest.fixture(scope="module")
def clip(yolox_path, bikes_path):
    """[(stream_ts_ms, Detections)] for frames FIRST..LAST-1 of bikes.mp4 (PTS from the container)."""
    cv2.setNumThreads(1)
    detector = YoloxDetector(yolox_path, input_size=416, score_threshold=0.35, nms_iou=0.45, intra_op_threads=1)
    cap = cv2.VideoCapture(str(bikes_path))
    out = []
    for index in range(LAST):
        ok, image = cap.read()
        assert ok, f"bikes.mp4 ended at frame {index}"
        if index >= FIRST:
            out.append((cap.get(cv2.CAP_PROP_POS_MSEC), detector(image)))
    cap.release()
    return out


def run(tracker, clip):
    return [tracker.update(dets, ts) for ts, dets in clip]


def test_moving_person_keeps_one_id(clip):
    tracked = run(CameraTracker(TrackerConfig()), clip)
    person_ids, person_x = [], []
    for dets in tracked:
        people = np.flatnonzero((dets.class_id == 0) & (dets.score > 0.8))
        if len(people):
            best = people[np.argmax(dets.score[people])]
            person_ids.append(int(dets.track_id[best]))
            person_x.append(float(dets.xyxy[best, 0]))
    assert len(person_ids) >= 10, "the cyclist should be detected in most frames of the clip"
    assert person_ids[0] == -1, "a new track is tentative on its first frame"
    confirmed = person_ids[1:]
    assert min(confirmed) >= 0 and len(set(confirmed)) == 1, f"id changed while the person moved: {person_ids}"
    assert person_x[-1] - person_x[0] > 100, "the box moved across the frame (not a static object)"


def test_rows_keep_their_order_and_boxes(clip):
    tracker = CameraTracker(TrackerConfig())
    for ts, dets in clip:
        out = tracker.update(dets, ts)
        assert len(out) == len(dets)
        np.testing.assert_array_equal(out.xyxy, dets.xyxy)
        np.testing.assert_array_equal(out.score, dets.score)
        assert out.track_id.dtype == np.int64
        ids = out.track_id[out.track_id >= 0]
        assert len(ids) == len(set(ids.tolist())), "two detections of one frame share a track"


def test_lost_tracks_expire_after_lost_track_s_of_stream_time(clip):
    tracker = CameraTracker(TrackerConfig(lost_track_s=1.0))
    run(tracker, clip)
    alive = tracker.alive_ids()
    assert alive
    last_ts = clip[-1][0]
    tracker.update(Detections.empty(), last_ts + 500)
    assert tracker.alive_ids() == alive, "kept while lost for less than lost_track_s"
    tracker.update(Detections.empty(), last_ts + 1600)
    assert tracker.alive_ids() == set()


def test_clock_going_backwards_restarts_without_reusing_ids(clip):
    tracker = CameraTracker(TrackerConfig())
    first_pass = run(tracker, clip)
    seen = {int(t) for dets in first_pass for t in dets.track_id if t >= 0}
    second_pass = run(tracker, clip)  # same frames again: the PTS jumps back (a looping file)
    again = {int(t) for dets in second_pass for t in dets.track_id if t >= 0}
    assert tracker.resets == 1
    assert again and not (again & seen), "ids after a restart must not collide with earlier ones"
    assert len(again) == len(seen), "the same frames give the same number of tracks"


def test_frame_without_usable_pts_is_left_untracked(clip):
    tracker = CameraTracker(TrackerConfig())
    run(tracker, clip[:8])
    alive = tracker.alive_ids()
    ts, dets = clip[8]
    out = tracker.update(dets, float("nan"))
    assert len(out) == len(dets) and (out.track_id == -1).all()
    assert tracker.alive_ids() == alive and tracker.resets == 0
    assert (tracker.update(dets, ts).track_id >= 0).any(), "tracking goes on with the next good PTS"

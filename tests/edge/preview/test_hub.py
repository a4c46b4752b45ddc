"""The edge's on-demand previews (issue 20, item 2): nothing is drawn or encoded until someone watches a camera;
then previews come at most ``preview_fps`` per second, at most ``preview_width_px`` wide, with the tracks'
boxes, labels (class, score, track, identity or text) and the camera's lines and zones drawn on a real frame."""

from __future__ import annotations

import dataclasses
import time

import cv2
import numpy as np
import pytest

from tests.edge.privacy.frames import outgoing
from vcascade.core.config import AnalyticsConfig, CameraConfig, CountingLineConfig, UiConfig, ZoneConfig
from vcascade.core.detections import Detections
from vcascade.core.protocol.wire import EmbeddingOutput, Result, Roi, TextOutput
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.capture.frames import Frame
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.preview.annotate import camera_geometry
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity
from vcascade.edge.way_back import Answered, EventRaised, Tracked

NAMES = ["person", "bicycle"]


@pytest.fixture(scope="module")
def bikes_frame(bikes_path) -> np.ndarray:
    """The 40th frame of bikes.mp4: (272, 640, 3) uint8 BGR."""
    cap = cv2.VideoCapture(str(bikes_path))
    for _ in range(40):
        ok, image = cap.read()
    cap.release()
    assert ok
    return image


def frame_of(image: np.ndarray, seq: int = 0, camera: str = "cam") -> Frame:
    return Frame(camera, seq, image, 40.0 * seq, time.perf_counter(), time.time() * 1000)


def hub(identities: IdentityCache | None = None, **ui) -> PreviewHub:
    return PreviewHub(UiConfig(**ui), NAMES, identities or IdentityCache("e"))


def decoded(jpeg: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)


def test_nothing_is_due_while_nobody_watches():
    previews = hub()
    now = time.monotonic()
    assert not previews.due("cam", now) and not previews.due("cam", now + 100)
    assert previews.latest("cam") is None and previews.encoded == {}


def test_a_watched_camera_gets_previews_at_the_capped_rate_until_its_lease_ends(bikes_frame):
    previews = hub(preview_fps=2, watch_lease_s=1)
    previews.watch("cam")
    now = time.monotonic()
    assert previews.due("cam", now) and not previews.due("other", now)
    previews.offer(outgoing(frame_of(bikes_frame)), Detections.empty(), now)
    assert not previews.due("cam", now + 0.49)  # 2 per second: the next one 0.5 s later
    assert previews.due("cam", now + 0.5)
    assert not previews.due("cam", now + 1.5)  # the lease (1 s) ran out without another request
    assert previews.encoded == {"cam": 1}


def test_preview_is_capped_in_width_and_draws_the_boxes(bikes_frame):
    previews = hub(preview_width_px=320)
    box = Detections(np.array([[100, 60, 300, 240]], np.float32), np.array([0.9]), np.array([0]), np.array([3]))
    preview = previews.offer(outgoing(frame_of(bikes_frame, seq=7)), box, time.monotonic())
    image = decoded(preview.image.jpeg)
    assert image.shape == (136, 320, 3)  # 640x272 halved, aspect ratio kept
    assert preview.frame_seq == 7 and preview.boxes_xyxy_px == ((50, 30, 150, 120),)
    raw = cv2.resize(bikes_frame, (320, 136), interpolation=cv2.INTER_AREA)
    edge_diff = np.abs(image[31:90, 50:52].astype(int) - raw[31:90, 50:52].astype(int)).mean()  # the box's left side
    inside = np.abs(image[60:100, 70:130].astype(int) - raw[60:100, 70:130].astype(int)).mean()  # inside: untouched
    assert edge_diff > 40 and inside < 8


def test_labels_carry_class_score_track_and_the_identity_or_text(bikes_frame):
    identities = IdentityCache("e")
    identities.retain("cam", {3, 4})
    identities.remember(roi("cam", 3, "r1"), EmbeddingOutput(7, 0.9, False))
    identities.remember(roi("cam", 4, "r2"), TextOutput("AB123", 0.9))
    previews = hub(identities)
    dets = Detections(np.array([[0, 0, 10, 10]] * 4, np.float32), np.array([0.9, 0.8, 0.5, 0.7]),
                      np.array([0, 1, 0, 1]), np.array([3, 4, 5, -1]))  # fmt: skip
    labels = [previews._label("cam", dets, row) for row in range(4)]
    assert labels == ["person 0.90 #3 id 7", "bicycle 0.80 #4 AB123", "person 0.50 #5", "bicycle 0.70"]


@pytest.mark.parametrize("coordinates, scale", [("pixels", (1.0, 1.0)), ("normalized", (1 / 640, 1 / 272))])
def test_lines_and_zones_of_the_camera_analytics_are_drawn(bikes_frame, coordinates, scale):
    sx, sy = scale
    camera = CameraConfig(url="x.mp4", edge="e", analytics=AnalyticsConfig(
        coordinates=coordinates,
        lines=[CountingLineConfig(name="gate", points=((0, 200 * sy), (639 * sx, 200 * sy)))],
        zones=[ZoneConfig(name="kerb", polygon=[(400 * sx, 20 * sy), (600 * sx, 20 * sy), (600 * sx, 120 * sy)])],
    ))
    geometry = camera_geometry(camera)
    assert len(geometry.lines) == 1 and len(geometry.zones) == 1
    assert camera_geometry(CameraConfig(url="x.mp4", edge="e")).lines == ()
    preview = hub().offer(outgoing(frame_of(bikes_frame)), Detections.empty(), time.monotonic(), geometry)
    image, raw = decoded(preview.image.jpeg), bikes_frame
    assert np.abs(image[199:202, 100:500].astype(int) - raw[199:202, 100:500].astype(int)).mean() > 40
    assert np.abs(image[19:22, 420:580].astype(int) - raw[19:22, 420:580].astype(int)).mean() > 40


def roi(camera: str, track_id: int, roi_id: str) -> Roi:
    return Roi(roi_id=roi_id, camera=camera, frame_seq=0, stream_ts_ms=1.0, capture_unix_ms=0.0,
               xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.5, track_id=track_id)


def answered(camera: str, roi_id: str) -> Answered:
    pending = PendingRoi(roi(camera, 1, roi_id), 0.0, 0.0, 0.0, 0.0)
    return Answered(pending, Result(roi_id=roi_id, worker="w", output=EmbeddingOutput(1, 0.9, False)), {"end_to_end": 1.0})


def test_recent_lines_are_kept_only_for_watched_cameras_events_apart_tracked_lines_left_out():
    previews = hub(recent_results=2)
    previews.take(answered("cam", "0"))  # nobody watches yet: ignored
    previews.watch("cam")
    for i in range(3):
        previews.take(answered("cam", str(i + 1)))
    previews.take(answered("other", "9"))  # another camera, not watched: ignored
    previews.take(EventRaised("cam", AnalyticsEvent("zone_enter", "dock", 1, "person", 0.0, 0.0), None, "e1"))
    identity = TrackIdentity(EmbeddingOutput(1, 0.9, False), "3", 1.0)
    previews.take(Tracked("cam", 5, 1.0, 0.0, (0.0, 0.0, 1.0, 1.0), 0, "person", 0.9, 1, identity))  # not kept
    recent = previews.recent("cam")
    assert [line["roi_id"] for line in recent["results"]] == ["2", "3"]  # bounded, oldest first
    assert recent["results"][0]["status"] == "ok" and recent["results"][0]["identity_id"] == 1  # the sinks' lines
    assert [e["event_id"] for e in recent["events"]] == ["e1"]
    previews.forget("cam")
    assert previews.recent("cam") == {"results": [], "events": []} and not previews.watching("cam")


def test_lines_and_zones_are_labelled_with_their_names(bikes_frame):
    camera = CameraConfig(url="x.mp4", edge="e", analytics=AnalyticsConfig(
        lines=[CountingLineConfig(name="gate", points=((0, 200), (639, 200)))],
        zones=[ZoneConfig(name="kerb", polygon=[(400, 40), (600, 40), (600, 120)])],
    ))
    named = camera_geometry(camera)
    assert (named.line_names, named.zone_names) == (("gate",), ("kerb",))
    unnamed = dataclasses.replace(named, line_names=(), zone_names=())
    images = [decoded(hub().offer(outgoing(frame_of(bikes_frame)), Detections.empty(), time.monotonic(), g).image.jpeg)
              for g in (named, unnamed)]  # fmt: skip
    with_names, without = (image.astype(int) for image in images)
    assert np.abs(with_names[187:196, 2:30] - without[187:196, 2:30]).mean() > 40  # the label above the line's start
    assert np.abs(with_names[27:36, 402:430] - without[27:36, 402:430]).mean() > 40  # and above the zone's
    assert np.abs(with_names[230:260, 300:600] - without[230:260, 300:600]).mean() < 2  # nothing else moved

"""An event's picture, taken by the camera's analytics step on a real frame of the sample video: the frame shrunk
to ``frame_width_px`` with the box and the line drawn, the box cut from the full frame; written by the history
writer as JPEG evidence."""

from __future__ import annotations

import time

import cv2
import numpy as np

from tests.edge.history.way_back_events import video_frames
from vcascade.core.config import AnalyticsConfig
from vcascade.core.detections import Detections
from vcascade.core.schema.history import HistoryConfig
from vcascade.core.schema.privacy import PrivacyConfig
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.privacy.redaction import CameraRedaction
from vcascade.edge.capture.frames import Frame
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory
from vcascade.edge.history.writer import HistoryWriter
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.way_back import EventRaised

CFG = AnalyticsConfig(lines=[{"name": "kerb", "points": [[0, 150], [640, 150]]}])


def box(y: float) -> Detections:
    return Detections(np.array([[300, y - 60, 360, y]], np.float32), np.array([0.9], np.float32),
                      np.array([0]), np.array([4]))


def crossing(images: list[np.ndarray], width_px: int | None, privacy: PrivacyConfig | None = None) -> list[EventRaised]:
    """The events of a box crossing the line over ``images``; pictures made from each frame as it leaves the edge
    (the redaction step with ``privacy``)."""
    raised: list[EventRaised] = []
    analytics = CameraAnalytics("edge-pic", "cam-p", CFG, ["person"], IdentityCache("edge-pic"), raised.append,
                                width_px, 95)  # fmt: skip
    redaction = CameraRedaction(privacy, None, ["person"])
    for seq, (image, y) in enumerate(zip(images, (100.0, 130.0, 200.0, 220.0))):
        frame = Frame("cam-p", seq, image, 40.0 * seq, time.perf_counter(), time.time() * 1000)
        analytics.process(frame, box(y), {4}, redaction.redact(frame, box(y)))
    return raised


def decoded(image) -> np.ndarray:
    assert image.exit == "snapshot"  # made by the redaction step for the history's exit
    return cv2.imdecode(np.frombuffer(image.jpeg, np.uint8), cv2.IMREAD_COLOR)


def test_an_event_carries_its_picture_and_the_writer_keeps_it(bikes_path, tmp_path):
    images = video_frames(bikes_path, 4)
    raised = crossing(images, 160)
    assert [e.event.type for e in raised] == ["line_cross"]
    picture = raised[0].frame
    assert picture is not None and decoded(picture.annotated).shape == (68, 160, 3)  # 640x272 shrunk to 160 wide
    frame_at = images[2]  # the box crossed in the third frame
    crop = decoded(picture.crop).astype(np.int16)
    assert np.abs(crop - frame_at[140:200, 300:360]).mean() < 4  # the box's pixels, JPEG at quality 95
    shrunk = cv2.resize(frame_at, (160, 68), interpolation=cv2.INTER_AREA).astype(np.int16)
    assert np.abs(decoded(picture.annotated).astype(np.int16) - shrunk).max() > 100  # the box and line drawn
    folder = tmp_path / "history"
    writer = HistoryWriter("edge-pic", HistoryConfig(), {}, lambda: SqliteHistory(folder), EvidenceFolder(folder))
    writer.start().keep(raised[0])
    writer.close(10.0)
    (row,) = SqliteHistory(folder, readonly=True).query(HistoryQuery(events_only=True))
    annotated = cv2.imread(str(folder / row["frame_path"]))
    crop = cv2.imread(str(folder / row["crop_path"]))
    assert annotated.shape == (68, 160, 3) and crop.shape == (60, 60, 3)
    assert (row["event_type"], row["place"], row["direction"]) == ("line_cross", "kerb", "out")


def test_no_picture_without_the_history():
    images = [np.zeros((272, 640, 3), np.uint8)] * 4
    assert [e.frame for e in crossing(images, None)] == [None]

"""Way-back events as the link and the analytics hand them to the history, with real JPEG crops cut from the
sample video (tests of :mod:`vcascade.edge.history`)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import av
import cv2
import numpy as np

from vcascade.core.protocol.wire import EmbeddingOutput, Result, Roi, TextOutput
from vcascade.core.detections import Detections
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.capture.frames import Frame
from vcascade.edge.capture.state import Transition
from vcascade.edge.history.event_frame import EventFrame
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.privacy.redaction import CameraRedaction
from vcascade.edge.selection.identity_cache import TrackIdentity
from vcascade.edge.way_back import Answered, CameraStateChanged, EventRaised, EventUpdated

_ids = itertools.count(1)


def video_frames(path: Path, count: int) -> list[np.ndarray]:
    """The first ``count`` frames of a video, (H, W, 3) uint8 BGR."""
    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="bgr24"))
            if len(frames) == count:
                break
    return frames


def crop_jpeg(frame: np.ndarray, box: tuple[int, int, int, int] = (100, 40, 220, 200)) -> bytes:
    x1, y1, x2, y2 = box
    ok, buf = cv2.imencode(".jpg", frame[y1:y2, x1:x2], [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def picture(image: np.ndarray, box: tuple[int, int, int, int] = (100, 40, 220, 200)) -> EventFrame:
    """An event's picture made as the edge makes it, by the redaction step (no privacy settings): ``image`` at half
    size and the ``box`` cut from it, each a JPEG for the ``snapshot`` exit."""
    x1, y1, x2, y2 = box
    frame = Frame("cam-a", 1, image, 40.0, time.perf_counter(), time.time() * 1000.0)
    leaving = CameraRedaction(None, None, ["person"]).redact(frame, Detections.empty())
    return EventFrame(leaving.render("snapshot", lambda px: np.ascontiguousarray(px[::2, ::2]), 90),
                      leaving.render("snapshot", lambda px: np.ascontiguousarray(px[y1:y2, x1:x2]), 90))


def answered(
    camera: str = "cam-a", identity: int | None = 7, text: str | None = None, crop: bytes | None = None,
    capture_unix_ms: float | None = None, worker: str = "worker-1", merged_from: tuple[int, ...] = (),
    track_id: int = 3, provisional: bool = False,
) -> Answered:
    """An answered ROI: an embedding answer with ``identity`` (None: a text answer reading ``text``)."""
    n = next(_ids)
    now_ms = time.time() * 1000.0 if capture_unix_ms is None else capture_unix_ms
    roi = Roi(roi_id=f"edge-1-run-{n}", camera=camera, frame_seq=n, stream_ts_ms=40.0 * n, capture_unix_ms=now_ms,
              xyxy=(100.0, 40.0, 220.0, 200.0), crop_xyxy=(100, 40, 220, 200), class_id=0, score=0.9,
              track_id=track_id)
    if identity is not None:
        output = EmbeddingOutput(identity_id=identity, similarity=0.9, enrolled=False, provisional=provisional,
                                 merged_from=merged_from)
    else:
        output = TextOutput(text=text or "", text_score=0.8)
    pending = PendingRoi(roi, 0.0, 0.0, 0.0, 0.0, class_name="person")
    return Answered(pending, Result(roi_id=roi.roi_id, worker=worker, output=output), {"end_to_end": 10.0}, crop)


def raised(
    camera: str = "cam-a", kind: str = "line_cross", place: str = "door", identity: int | None = None,
    frame: EventFrame | None = None, capture_unix_ms: float | None = None, track_id: int = 3,
) -> EventRaised:
    now_ms = time.time() * 1000.0 if capture_unix_ms is None else capture_unix_ms
    direction = "in" if kind == "line_cross" else None
    event = AnalyticsEvent(kind, place, track_id, "person", 1000.0, now_ms, direction=direction)
    known = None if identity is None else TrackIdentity(
        EmbeddingOutput(identity_id=identity, similarity=0.9, enrolled=False), "roi", 1000.0
    )
    return EventRaised(camera, event, known, f"ev{next(_ids):030d}", frame)


def updated(event: EventRaised, identity: int) -> EventUpdated:
    known = TrackIdentity(EmbeddingOutput(identity_id=identity, similarity=0.9, enrolled=False), "roi", 1000.0)
    return EventUpdated(event.event_id, event.camera, event.event.track_id, known)


def state_changed(camera: str = "cam-a", target: str = "streaming") -> CameraStateChanged:
    return CameraStateChanged(camera, Transition(time.perf_counter(), "connecting", target, "opened", ""))

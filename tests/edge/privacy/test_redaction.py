"""The redaction step on a real frame of the sample footage: bikes.mp4 frame 114, where CenterFace finds faces
(people at the back of the street, 25-35 px high). Faces leave blurred or pixelated, exits and routes that opt out
leave them as they are (and say so), the head rule covers person boxes whatever the face detector finds, and no
image can leave that the redaction step did not make."""

from __future__ import annotations

import time

import av
import cv2
import numpy as np
import pytest

from vcascade.core.config import AnalyticsConfig, PrivacyConfig, UiConfig
from vcascade.core.detections import Detections
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.capture.frames import Frame
from vcascade.edge.history.picture import event_frame
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.privacy.centerface import CenterFace
from vcascade.edge.privacy.redaction import CameraRedaction, RedactedImage, require_redacted
from vcascade.edge.selection.identity_cache import IdentityCache

FACE_FRAME = 114
NAMES = ("person", "bicycle")


@pytest.fixture(scope="module")
def face_frame(bikes_path) -> Frame:
    with av.open(str(bikes_path)) as container:
        for i, decoded in enumerate(container.decode(video=0)):
            if i == FACE_FRAME:
                image = decoded.to_ndarray(format="bgr24")
                return Frame("cam", i, image, i * 40.0, time.perf_counter(), time.time() * 1000)
    raise AssertionError("bikes.mp4 is too short")


@pytest.fixture(scope="module")
def centerface(models_dir) -> CenterFace:
    return CenterFace(models_dir / "centerface.onnx")


def sharpness(image: np.ndarray) -> float:
    """Variance of the Laplacian of the grey image: high for detail, near 0 for a blurred or flat area."""
    return float(cv2.Laplacian(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), cv2.CV_64F).var())


def detail_kept(after: np.ndarray, before: np.ndarray) -> float:
    """Correlation of the two areas' Laplacians (their fine detail): about 0.7-0.97 for an area only JPEG-encoded
    at quality 95 (measured on this frame's faces), about 0 when blurred or pixelated (a pixelated area's detail is
    its block edges, which do not follow the face's)."""
    a, b = (cv2.Laplacian(cv2.cvtColor(x, cv2.COLOR_BGR2GRAY), cv2.CV_64F).ravel() for x in (after, before))
    return float(np.corrcoef(a, b)[0, 1])


def decoded(image: RedactedImage) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(image.jpeg, np.uint8), cv2.IMREAD_COLOR)


def redaction(centerface: CenterFace, **faces) -> CameraRedaction:
    return CameraRedaction(PrivacyConfig(faces=faces), centerface, NAMES)


def test_centerface_finds_the_faces_of_the_frame(centerface, face_frame):
    xyxy, score = centerface.detect(face_frame.image, 0.2)
    assert len(xyxy) >= 3 and score.max() > 0.5
    assert ((xyxy[:, 2:] - xyxy[:, :2]) > 8).all()  # face-sized boxes, in frame pixels


@pytest.mark.parametrize("method", ["blur", "pixelate"])
def test_every_face_leaves_unrecognisable(centerface, face_frame, method):
    out = redaction(centerface, method=method).redact(face_frame, Detections.empty())
    whole = np.array([0, 0, 640, 272])
    image = out.crop(whole, 95)
    assert image.redacted and image.exit == "roi" and image.regions == len(out.regions_xyxy) >= 3
    received = decoded(image)
    plain = decoded(CameraRedaction(None, None, NAMES).redact(face_frame, Detections.empty()).crop(whole, 95))
    for x1, y1, x2, y2 in out.regions_xyxy:
        before, after = face_frame.image[y1:y2, x1:x2], received[y1:y2, x1:x2]
        assert detail_kept(plain[y1:y2, x1:x2], before) > 0.6  # the measure sees a face that was left as it is
        assert detail_kept(after, before) < 0.3, (method, (x1, y1, x2, y2))
        if method == "blur":
            assert sharpness(after) < 0.5 * sharpness(before)
    outside = np.ones(received.shape[:2], bool)
    for x1, y1, x2, y2 in out.regions_xyxy:
        outside[y1:y2, x1:x2] = False
    assert np.abs(received.astype(int) - face_frame.image.astype(int))[outside].mean() < 4  # the rest: JPEG only


def test_exits_and_routes_that_opt_out_leave_faces_as_they_are(centerface, face_frame):
    whole = np.array([0, 0, 640, 272])
    preview_only = redaction(centerface, exits=["preview"]).redact(face_frame, Detections.empty())
    crop = preview_only.crop(whole, 95)
    assert not crop.redacted and crop.regions == 0
    assert preview_only.render("preview", lambda pixels: pixels.copy(), 95).redacted
    routed = redaction(centerface).redact(face_frame, Detections.empty()).crop(whole, 95, unredacted_faces=True)
    assert not routed.redacted


def test_head_rule_covers_person_boxes_the_face_detector_misses(centerface, face_frame):
    person = Detections(np.array([[20.0, 100.0, 60.0, 200.0], [500.0, 20.0, 560.0, 80.0]], np.float32),
                        np.array([0.9, 0.9], np.float32), np.array([0, 1]), np.array([1, 2]))  # fmt: skip
    out = redaction(centerface, head_rule={"top_fraction": 0.25}, min_score=0.99).redact(face_frame, person)
    image = decoded(out.crop(np.array([0, 0, 640, 272]), 95))
    assert [20, 100, 60, 125] in out.regions_xyxy.tolist()  # the person's top quarter; the bicycle's box is not
    assert not any(r[0] == 500 for r in out.regions_xyxy.tolist())
    assert detail_kept(image[100:125, 20:60], face_frame.image[100:125, 20:60]) < 0.3
    assert detail_kept(image[125:200, 20:60], face_frame.image[125:200, 20:60]) > 0.6  # below the band: as it was


def test_nothing_but_the_redaction_step_makes_an_image_that_may_leave(face_frame):
    with pytest.raises(TypeError, match="made only by vcascade.edge.privacy.redaction"):
        RedactedImage(b"\xff\xd8", "roi", True, "cam", 0, 0.0, 0)
    with pytest.raises(TypeError, match="the roi exit takes only a RedactedImage"):
        require_redacted(b"\xff\xd8raw jpeg", "roi")
    plain = CameraRedaction(None, None, NAMES).redact(face_frame, Detections.empty())
    with pytest.raises(TypeError, match="the roi exit takes only a RedactedImage made for it"):
        require_redacted(plain.render("preview", lambda p: p, 80), "roi")
    hub = PreviewHub(UiConfig(), NAMES, IdentityCache("e"))
    with pytest.raises(TypeError, match="previews are made only of a RedactedFrame"):
        hub.offer(face_frame, Detections.empty(), time.monotonic())


def test_an_events_evidence_pictures_leave_with_their_faces_redacted(centerface, face_frame):
    """The history's exit (``snapshot``): an event's crop and annotated frame are made from the redacted frame."""
    faces, _ = centerface.detect(face_frame.image, 0.5)
    x1, y1, x2, y2 = (int(v) for v in faces[0])
    tracked = Detections(np.array([[x1, y1, x2, y2]], np.float32), np.array([0.9], np.float32), np.array([0]),
                         np.array([4]))  # fmt: skip
    event = AnalyticsEvent("line_cross", "kerb", 4, "person", face_frame.stream_ts_ms, face_frame.capture_unix_ms,
                           direction="in")  # fmt: skip
    lines = AnalyticsConfig(lines=[{"name": "kerb", "points": [[0, 150], [640, 150]]}])
    picture = event_frame(redaction(centerface).redact(face_frame, tracked), tracked, event, lines, 320, 95)
    assert picture.crop.exit == picture.annotated.exit == "snapshot"
    assert picture.crop.redacted and picture.annotated.redacted
    assert detail_kept(decoded(picture.crop), face_frame.image[y1:y2, x1:x2]) < 0.3
    plain = event_frame(CameraRedaction(None, None, NAMES).redact(face_frame, tracked), tracked, event, lines, 320, 95)
    assert not plain.crop.redacted and detail_kept(decoded(plain.crop), face_frame.image[y1:y2, x1:x2]) > 0.6

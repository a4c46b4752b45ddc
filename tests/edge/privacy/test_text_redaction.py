"""Text redaction on real pixels: a frame of the sample footage (bikes.mp4 frame 114) with a plate-like string
rendered on it as tools/bench_text.py renders plates (DejaVu Sans Bold, 16 px capitals). PP-OCR's DB text
detector finds the plate; the preview (read by a real HTTP client of the edge's preview server) and the evidence
snapshot (written by the real history writer) leave with it blurred, ROI crops leave with it as it is (they are
what a text recognizer reads), and ``check`` and the camera refuse a missing model."""

from __future__ import annotations

import threading
import time

import av
import cv2
import numpy as np
import pytest
from PIL import Image

from tests.demo import demo_data
from tests.edge.preview.test_server import get
from vcascade.core.config import AnalyticsConfig, Deployment, PrivacyConfig
from vcascade.core.detections import Detections
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.schema.history import HistoryConfig
from vcascade.core.text_regions import DbParams
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.capture.source import CameraReader
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory
from vcascade.edge.history.writer import HistoryWriter
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.preview.server import serve_previews
from vcascade.edge.privacy.masks import FrameMasks
from vcascade.edge.privacy.model_file import PrivacyModels
from vcascade.edge.privacy.redaction import CameraRedaction
from vcascade.edge.privacy.text_detector import TextDetector, TextModelError
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.app.preflight_models import model_problems
from tools.bench_text import render_plate

FRAME = 114
PLATE_XY = (262, 152)
"""Top-left corner of the pasted plate, frame px (on the road, inside the event box below)."""
TEXT = "KT57 HXB"
TOKEN = "preview-token-0123456789"


def plate_frame(image: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """``image`` with the plate pasted at :data:`PLATE_XY`, and the plate's box x1, y1, x2, y2 (x2/y2 exclusive)."""
    plate = render_plate(TEXT, 16)
    pil = Image.fromarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))
    pil.paste(plate, PLATE_XY, plate)
    x, y = PLATE_XY
    return cv2.cvtColor(np.asarray(pil), cv2.COLOR_RGB2BGR), (x, y, x + plate.width, y + plate.height)


@pytest.fixture(scope="module")
def street(bikes_path) -> np.ndarray:
    """Frame :data:`FRAME` of bikes.mp4, (272, 640, 3) uint8 BGR."""
    with av.open(str(bikes_path)) as container:
        for i, decoded in enumerate(container.decode(video=0)):
            if i == FRAME:
                return decoded.to_ndarray(format="bgr24")
    raise AssertionError("bikes.mp4 is too short")


@pytest.fixture(scope="module")
def plated(street) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    return plate_frame(street.copy())


@pytest.fixture(scope="module")
def detector(models_dir) -> TextDetector:
    return TextDetector(models_dir / "PP-OCRv6_det_small.onnx")


def detail_kept(after: np.ndarray, before: np.ndarray) -> float:
    """Correlation of the two areas' Laplacians: near 1 for an area only JPEG-encoded, near 0 once blurred."""
    a, b = (cv2.Laplacian(cv2.cvtColor(x, cv2.COLOR_BGR2GRAY), cv2.CV_64F).ravel() for x in (after, before))
    return float(np.corrcoef(a, b)[0, 1])


def jpeg_pixels(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def assert_plate_unreadable(received: np.ndarray, plated_image: np.ndarray, box: tuple[int, int, int, int]) -> None:
    x1, y1, x2, y2 = box
    assert received.shape == plated_image.shape
    assert detail_kept(received[y1:y2, x1:x2], plated_image[y1:y2, x1:x2]) < 0.3
    top = received[: y1 - 40]  # far from the plate: only JPEG-coded
    assert np.abs(top.astype(int) - plated_image[: y1 - 40].astype(int)).mean() < 4


def redaction(detector: TextDetector, **text) -> CameraRedaction:
    return CameraRedaction(PrivacyConfig(text=text), None, ["person"], detector)


def test_the_text_detector_finds_the_plate(detector, plated):
    image, (x1, y1, x2, y2) = plated
    xyxy, score = detector.detect(image, DbParams(unclip_ratio=2.0, max_regions=64))
    covering = [b for b in xyxy if b[0] <= x1 + 6 and b[1] <= y1 + 6 and b[2] >= x2 - 6 and b[3] >= y2 - 6]
    assert covering and score.max() > 0.6


def test_a_frame_without_text_has_no_region(detector):
    assert len(detector.detect(np.full((272, 640, 3), 128, np.uint8), DbParams())[0]) == 0


def test_roi_crops_keep_their_text_and_whole_frame_exits_lose_it(detector, plated):
    image, box = plated
    out = redaction(detector, method="pixelate").redact(Frame("cam", 0, image, 0.0, 0.0, 0.0), Detections.empty())
    crop = out.crop(np.array([0, 0, 640, 272]), 95)
    assert not crop.redacted and crop.regions == 0 and not out.crop_fits(crop, "snapshot")
    x1, y1, x2, y2 = box
    assert detail_kept(jpeg_pixels(crop.jpeg)[y1:y2, x1:x2], image[y1:y2, x1:x2]) > 0.6
    snapshot = out.render("snapshot", lambda px: px.copy(), 95)
    assert snapshot.redacted and snapshot.regions == len(out.text_xyxy) >= 1
    assert_plate_unreadable(jpeg_pixels(snapshot.jpeg), image, box)


def test_the_preview_a_client_reads_over_http_has_the_plate_blurred(detector, plated, tmp_path, free_port):
    image, box = plated
    data = demo_data()
    data["edges"]["edge-1"].update(preview_port=free_port())
    data["ui"] = {"token": TOKEN, "preview_width_px": 640}
    data["cameras"] = {"street-1": {"url": "/nonexistent.mp4", "edge": "edge-1", "privacy": {"text": {}}}}
    dep = Deployment.model_validate(data)
    stop = threading.Event()
    reader = CameraReader("edge-1", "street-1", dep.cameras["street-1"], FrameSlots(), stop)  # not started
    hub = PreviewHub(dep.ui, ["person"], IdentityCache("edge-1"))
    server = serve_previews(EdgeSettings.from_deployment(dep, "edge-1"), hub, lambda: [reader])
    try:
        port = server.server_address[1]
        assert get(port, "/preview/street-1.jpg", TOKEN)[0] == 204  # asked: previews start
        camera = CameraRedaction(dep.cameras["street-1"].privacy, None, ["person"], detector)
        hub.offer(camera.redact(Frame("street-1", 3, image, 120.0, 0.0, 0.0), Detections.empty()), Detections.empty(),
                  time.monotonic())  # fmt: skip
        status, body, _ = get(port, "/preview/street-1.jpg", TOKEN)
        assert status == 200
        assert_plate_unreadable(jpeg_pixels(body), image, box)
    finally:
        server.shutdown()
        stop.set()


def test_the_evidence_the_history_writer_keeps_has_the_plate_blurred(detector, plated, tmp_path):
    image, box = plated
    x1, y1, x2, y2 = box
    lines = AnalyticsConfig(lines=[{"name": "kerb", "points": [[0, 150], [640, 150]]}])
    raised = []
    analytics = CameraAnalytics("edge-pic", "cam-p", lines, ["person"], IdentityCache("edge-pic"), raised.append,
                                640, 95)  # fmt: skip
    camera = redaction(detector)
    for seq, bottom in enumerate((100.0, 130.0, float(y2 + 4), float(y2 + 20))):  # crosses in the third frame
        tracked = Detections(np.array([[x1 - 10, bottom - 60, x2 + 10, bottom]], np.float32),
                             np.array([0.9], np.float32), np.array([0]), np.array([4]))  # fmt: skip
        frame = Frame("cam-p", seq, image, 40.0 * seq, time.perf_counter(), time.time() * 1000)
        analytics.process(frame, tracked, {4}, camera.redact(frame, tracked))
    (event,) = raised
    folder = tmp_path / "history"
    writer = HistoryWriter("edge-pic", HistoryConfig(), {}, lambda: SqliteHistory(folder), EvidenceFolder(folder))
    writer.start().keep(event)
    writer.close(10.0)
    (row,) = SqliteHistory(folder, readonly=True).query(HistoryQuery(events_only=True))
    annotated = cv2.imread(str(folder / row["frame_path"]))
    crop = cv2.imread(str(folder / row["crop_path"]))
    assert event.frame.annotated.redacted and event.frame.crop.redacted
    x1, y1, x2, y2 = box
    assert detail_kept(annotated[y1:y2, x1:x2], image[y1:y2, x1:x2]) < 0.3
    crop_y1 = int(y2 + 4 - 60)  # the crop is the event's box, cut from the redacted frame
    plate_in_crop = crop[y1 - crop_y1 : y2 - crop_y1, 10 : 10 + x2 - x1]
    assert detail_kept(plate_in_crop, image[y1:y2, x1:x2]) < 0.3


def test_a_missing_or_wrong_text_model_is_named_at_check_and_refused(models_dir, tmp_path):
    data = demo_data()
    data["cameras"]["street-1"]["privacy"] = {"text": {"model": "no-such-text-model.onnx"}}
    problems = model_problems(Deployment.model_validate(data), models_dir)
    line = next(p for p in problems if "privacy" in p)
    assert line.startswith("cameras.street-1.privacy.text.model: text model no-such-text-model.onnx not found")
    assert "fetch_models --text" in line
    data["cameras"]["street-1"]["privacy"] = {"text": {"model": str(models_dir / "PP-OCRv6_rec_small.onnx")}}
    (line,) = [p for p in model_problems(Deployment.model_validate(data), models_dir) if "privacy" in p]
    assert line.startswith("cameras.street-1.privacy.text.model: ") and "expected one input (N, 3, H, W)" in line
    with pytest.raises(TextModelError, match="DB text probability map"):
        TextDetector(models_dir / "PP-OCRv6_rec_small.onnx")
    assert PrivacyModels(models_dir).text(PrivacyConfig(text={}).text) is not None
    data["cameras"]["street-1"]["privacy"]["faces"] = {"model": "no-such-face-model.onnx"}
    keys = [p.split(":")[0] for p in model_problems(Deployment.model_validate(data), models_dir) if "privacy" in p]
    assert keys == ["cameras.street-1.privacy.faces.model", "cameras.street-1.privacy.text.model"]  # both, at once


def test_no_text_is_looked_for_in_a_mask_and_masked_pixels_leave_as_the_fill(detector, street, plated):
    """A mask's block of fill colour reads as text to the DB detector (measured on bikes.mp4: a region over the
    mask on 82 of 84 frames); the step looks for none there, and a region next to a mask leaves the mask filled."""
    fill = (7, 200, 13)
    privacy = PrivacyConfig(fill_bgr=fill, masks=[{"name": "corner", "polygon": [[520, 120], [640, 120], [640, 272],
                                                                                [520, 272]]}], text={})  # fmt: skip
    camera = CameraRedaction(privacy, None, ["person"], detector)
    masked_street = FrameMasks(privacy).apply(street.copy())
    searched_everywhere = redaction(detector).text_regions(masked_street)
    assert any(x2 > 530 and y2 > 130 for _, _, x2, y2 in searched_everywhere.tolist())  # the fill taken for text
    assert not any(x2 > 530 and y2 > 130 for _, _, x2, y2 in camera.text_regions(masked_street).tolist())
    image, box = plated
    masked = FrameMasks(privacy).apply(image.copy())
    out = camera.redact(Frame("cam", 0, masked, 0.0, 0.0, 0.0), Detections.empty())
    received = jpeg_pixels(out.render("preview", lambda px: px.copy(), 95).jpeg)
    assert not any(x2 > 530 and y2 > 130 for _, _, x2, y2 in out.text_xyxy.tolist())
    assert_plate_unreadable(received, masked, box)
    beside = camera.blur(masked, np.array([[480, 100, 600, 200]]), "blur")  # a region over the mask's edge
    assert (beside[125:200, 525:640] == fill).all() and not (beside[100:118, 480:518] == masked[100:118, 480:518]).all()

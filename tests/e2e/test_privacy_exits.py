"""Every exit of an image, with a privacy mask, face and text redaction on, checked on the bytes that arrive: ROI crops at
a worker behind a real `vcascade broker` process (the test plays the worker on the broker's backend socket), and
previews read by a real HTTP client from a real `vcascade edge` process reading bikes.mp4. The footage is real:
CenterFace finds faces of the people at the back of the street (frame 114 has five, 12-35 px high).

What is checked: in every received image, the masked area is the fill colour and every face CenterFace finds in
the same (masked) source frame has lost its detail (its Laplacian no longer follows the source's: see
``detail_kept``), and in every preview so has every text region PP-OCR's detector finds there (the taxi's roof
sign, shop lettering; ROI crops keep their text for a text recognizer); ``vcascade_edge_images_out_total`` counts
every image that left, none of them unredacted.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
import yaml
import zmq

from tests.demo import EMBEDDER, demo_data, scrape_metrics
from vcascade.core.config import PrivacyConfig
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket
from vcascade.edge.privacy.centerface import CenterFace
from vcascade.edge.privacy.masks import FrameMasks
from vcascade.edge.privacy.redaction import CameraRedaction
from vcascade.edge.privacy.text_detector import TextDetector

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
FILL = (7, 200, 13)
MASK = [[520, 120], [640, 120], [640, 272], [520, 272]]
"""The bottom-right corner of the street: people walk through it."""
PRIVACY = {"frame_size_px": [640, 272], "fill_bgr": list(FILL), "masks": [{"name": "corner", "polygon": MASK}],
           "faces": {"method": "blur"}, "text": {"method": "blur"}}  # fmt: skip
STARTUP_S = 120
MIN_FACE_PX = 8
"""Face areas smaller than this on a side in a received image are too small to judge by their detail."""


def _source_frames(bikes_path: Path) -> list[np.ndarray]:
    """bikes.mp4's 250 frames with the mask filled, as the edge's reader hands them on."""
    masks = FrameMasks(PrivacyConfig.model_validate(PRIVACY))
    with av.open(str(bikes_path)) as container:
        return [masks.apply(frame.to_ndarray(format="bgr24")) for frame in container.decode(video=0)]


class Worker:
    """A DEALER on the broker's backend playing a worker of the embedder: announces credits, keeps every ROI it
    gets with its JPEG, answers each at once (no output) so that the edge's window keeps moving."""

    def __init__(self, endpoint: str) -> None:
        self.sock = make_socket(zmq.Context.instance(), zmq.DEALER, identity="worker-1")
        self.sock.connect(endpoint)
        self.rois: list[tuple[wire.Roi, bytes]] = []
        self._ready_s = 0.0

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if time.monotonic() - self._ready_s > 0.5:
                self.sock.send(wire.encode(wire.Ready(worker="worker-1", credits=8, recognizer=EMBEDDER)))
                self._ready_s = time.monotonic()
            if not self.sock.poll(100):
                continue
            _, header, payload = wire.split_message(self.sock.recv_multipart(), n_routing=0)
            if isinstance(header, wire.Roi):
                self.rois.append((header, bytes(payload[0])))
                answer = wire.Result(roi_id=header.roi_id, worker="worker-1", hops=[("stage0", 1.0)])
                self.sock.send(wire.encode(answer))

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def deployment(tmp_path, free_port, bikes_path, models_dir):
    """(config path, data, edge and broker processes) of one edge with the privacy settings and one broker."""
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(url=str(bikes_path), loop=True, privacy=PRIVACY)
    edge = data["edges"]["edge-1"]
    edge.update(metrics_port=free_port(), preview_port=free_port(), sinks=[], drain_timeout_s=2)
    edge["roi"]["policy"].update(mode="every_detection", classes=["person"])
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["heartbeat"] = {"interval_s": 0.5, "liveness": 6}
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))
    procs = {}
    for kind, name, more in (("broker", "broker-1", []), ("edge", "edge-1", ["--model-dir", str(models_dir)])):
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name, *more,
             "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    yield data, procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _images_out(port: int) -> dict[tuple[str, str], float]:
    counts = {}
    for line in scrape_metrics(port).splitlines():
        if line.startswith("vcascade_edge_images_out_total{"):
            labels = dict(part.split("=") for part in line[line.index("{") + 1:line.index("}")].split(","))
            counts[(labels["exit"].strip('"'), labels["redacted"].strip('"'))] = float(line.rsplit(" ", 1)[1])
    return counts


def detail_kept(after: np.ndarray, before: np.ndarray, where: np.ndarray | None = None) -> float:
    """How much of ``before``'s fine detail ``after`` still holds: the regression coefficient of the two areas'
    Laplacians (cov(after, before) / var(before)), i.e. their correlation times the ratio of their detail's
    amplitudes. Over bikes.mp4's faces of 8 px and more at the edge's settings: 0.53 to 1 for a face only
    JPEG-encoded, at most 0.11 once blurred. The correlation alone reads up to 0.49 for a blurred 12 px face
    beside a large bright shape (the blur leaves the shape's edge as a ramp, whose Laplacian still lines up),
    though nothing of the face's detail is left. ``where``: bool (h, w), the pixels judged (None: all)."""
    a, b = (cv2.Laplacian(cv2.cvtColor(x, cv2.COLOR_BGR2GRAY), cv2.CV_64F) for x in (after, before))
    if where is not None:
        a, b = a[where], b[where]
    a, b = a.ravel(), b.ravel()
    return float(np.cov(a, b)[0, 1] / b.var(ddof=1))


def _check_image(
    image: np.ndarray, source: np.ndarray, origin_xy: tuple[int, int], faces: np.ndarray, drawn: bool = False
) -> int:
    """Assert the received ``image`` (cut at ``origin_xy`` of ``source`` at the same scale) shows the mask's fill
    and no face's detail; returns how many faces were judged. ``drawn``: a preview, whose boxes and labels may
    cover part of the mask (then 90 % of its pixels must show the fill)."""
    x0, y0 = origin_xy
    h, w = image.shape[:2]
    inside = FrameMasks(PrivacyConfig.model_validate(PRIVACY)).raster(272, 640)[y0:y0 + h, x0:x0 + w]
    core = cv2.erode(inside.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)  # JPEG rings at the edge
    if core.any():
        off = np.abs(image[core].astype(int) - FILL).max(axis=1)
        assert (off < 40).mean() > 0.9 if drawn else off.max() < 40, "masked pixels left the edge"
    # the mask is filled again after blurring, so its sharp border is in both images on purpose: a region that
    # overlaps it (text found across the border) is judged on its pixels away from the mask (and its JPEG rings)
    away = ~cv2.dilate(inside.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)
    judged = 0
    for fx1, fy1, fx2, fy2 in faces:
        x1, y1, x2, y2 = max(fx1 - x0, 0), max(fy1 - y0, 0), min(fx2 - x0, w), min(fy2 - y0, h)
        if x2 - x1 < MIN_FACE_PX or y2 - y1 < MIN_FACE_PX or away[y1:y2, x1:x2].sum() < MIN_FACE_PX**2:
            continue
        kept = detail_kept(image[y1:y2, x1:x2], source[y0 + y1:y0 + y2, x0 + x1:x0 + x2], away[y1:y2, x1:x2])
        assert kept < 0.3, f"a face or text region at {(fx1, fy1, fx2, fy2)} left with its detail ({kept:.2f})"
        judged += 1
    return judged


def test_no_masked_pixel_and_no_face_leaves_unredacted(deployment, bikes_path, models_dir):
    data, procs = deployment
    sources = _source_frames(bikes_path)
    centerface = CenterFace(models_dir / "centerface.onnx")
    reader = CameraRedaction(PrivacyConfig.model_validate(PRIVACY), centerface, ["person"],
                             TextDetector(models_dir / "PP-OCRv6_det_small.onnx"))  # the edge's text settings
    faces_of: dict[int, np.ndarray] = {}
    texts_of: dict[int, np.ndarray] = {}

    def faces(seq: int) -> np.ndarray:
        if seq not in faces_of:  # the edge's own settings: min_score 0.2, boxes grown 1.3x (the test judges the face)
            faces_of[seq] = np.round(centerface.detect(sources[seq], 0.2)[0]).astype(int)
        return faces_of[seq]

    def texts(seq: int) -> np.ndarray:
        if seq not in texts_of:
            texts_of[seq] = reader.text_regions(sources[seq])
        return texts_of[seq]

    worker = Worker(f"tcp://127.0.0.1:{data['brokers']['broker-1']['backend_port']}")
    preview_url = f"http://127.0.0.1:{data['edges']['edge-1']['preview_port']}/preview/street-1.jpg"
    crop_faces = preview_faces = preview_texts = previews = 0
    masked_crops = 0
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and min(crop_faces, 3 * preview_faces, 3 * preview_texts, 3 * masked_crops) < 3:
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited: {proc.communicate()[1][-3000:]}"
            worker.pump(1.0)
            while worker.rois:
                roi, jpeg = worker.rois.pop()
                seq = roi.frame_seq % len(sources)
                image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
                x1, y1, x2, y2 = roi.crop_xyxy
                masked_crops += int(x2 > 525 and y2 > 125)
                crop_faces += _check_image(image, sources[seq], (x1, y1), faces(seq))
            try:
                with urllib.request.urlopen(preview_url, timeout=5) as resp:
                    if resp.status == 200:
                        seq = int(resp.headers["X-Frame-Seq"]) % len(sources)
                        image = cv2.imdecode(np.frombuffer(resp.read(), np.uint8), cv2.IMREAD_COLOR)
                        previews += 1
                        preview_faces += _check_image(image, sources[seq], (0, 0), faces(seq), drawn=True)
                        preview_texts += _check_image(image, sources[seq], (0, 0), texts(seq), drawn=True)
            except OSError:
                pass  # the endpoint is not up yet
        assert crop_faces >= 3 and min(preview_faces, preview_texts, masked_crops) >= 1, (
            crop_faces, preview_faces, preview_texts, masked_crops)
        counts = _images_out(data["edges"]["edge-1"]["metrics_port"])
        assert counts.get(("roi", "true"), 0) >= 1 and counts.get(("preview", "true"), 0) >= previews
        assert counts.get(("roi", "false"), 0) == 0 and counts.get(("preview", "false"), 0) == 0
    finally:
        worker.close()

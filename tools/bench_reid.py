"""Re-identification quality on real footage: several cameras made from bikes.mp4, none replaying another's pixels.

The scenario (:func:`scenario`, ``segments``): each camera shows its own time segment of the clip, through its own
view (edge/capture/views.py, the same code the edge runs for a camera's ``view:``): one camera as recorded, one as the
demo's ``street-2`` sees it (cropped, mirrored, downscaled, JPEG-recompressed), one cropped to the left part,
upscaled and recompressed harder. All cameras start together, so an object in the overlap of two segments is
seen on both, at different moments of its passage and in different pixels.

Ground truth: the edge's detector and ByteTrack run once over the full clip as recorded; a camera's ROI gets
the true identity whose box, carried into the camera's view, overlaps its box with IoU >= 0.5 (else it is
unlabelled: it still goes through the assignment, as it would in production, but is not scored).

Each camera's ROIs come from the edge's own detector, tracker and ROI policy (``every_detection``) on the
camera's frames. They are embedded by each embedder (the demo's MobileNetV2 and an HSV colour histogram), then
assigned identities by each assigner of tools/reid_assigners.py (one worker's gallery; several workers, each
with its own gallery; several workers on the shared identity space, without and with camera topology pruning;
micro-batches dealt round-robin as the broker alternates them) for a sweep of match thresholds, and scored by
tools/reid_metrics.py: pairwise precision/recall (all pairs and cross-camera pairs), IDF1, identity switches,
fragmentations, and embedding comparisons per ROI.

The track assigners (``+ tracks``) match tracked ROIs by their track's aggregate (docs/IDENTITY.md, "Identities
from tracks"), at the sweep's threshold, a track's first look at the crop's (:data:`CROP_THRESHOLD`); ``+ window``
rows keep a centroid of the latest :data:`CENTROID_WINDOW` looks (``identity.centroid_window``), ``+ gallery`` rows
:data:`GALLERY_SIZE` exemplars per identity (``identity.gallery``). Every ROI carries
the identity its track got in the answers the edge already has (:data:`ANSWER_LAG`). ``--replays 1,5,10`` replays
the scenario into one store and reports after each count how many identities the returning objects have and how
the cameras agree (tools/reid_replays.py).

``--blur-faces`` cuts every crop from the frame with its faces blurred, as an edge with ``privacy.faces`` sends
them (CenterFace, docs/PRIVACY.md), to measure what face redaction costs re-identification.

Usage: ``python -m tools.bench_reid [--scenario segments|demo] [--quick] [--stride N] [--json OUT]
[--model-dir DIR] [--blur-faces] [--replays 1,5,10 [--replay-threshold T] [--replay-workers 1,2]]`` (``--quick``:
two cameras over the first 150 frames, every 4th frame's ROIs, replays 1 and 3; about a minute of CPU, for CI; ``--scenario demo``: the demo's own two cameras and embedder classes, see :func:`scenario`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tools.reid_assigners import Assigner, OneWorker, SeveralWorkers, SharedSpace  # noqa: E402
from tools.reid_metrics import quality  # noqa: E402
from tools.reid_replays import print_replays, replays, variants  # noqa: E402
from tools.reid_scenario import (  # noqa: E402
    DEMO,
    EMBEDDER_CLASSES,
    ClipFrame,
    ColourHistogramEmbedder,
    Embedder,
    MobileNetEmbedder,
    Redact,
    demo_deployment,
    demo_detector,
    pin_threads,
    read_clip,
    track_clip,
    track_rois,
)

from vcascade.center.identity.topology import Topology  # noqa: E402
from vcascade.core.config import CameraViewConfig, PrivacyConfig  # noqa: E402
from vcascade.core.schema.privacy import CENTERFACE_MODEL  # noqa: E402
from vcascade.core.detections import Detections  # noqa: E402
from vcascade.edge.capture.views import view_boxes  # noqa: E402
from vcascade.edge.privacy.centerface import CenterFace  # noqa: E402
from vcascade.edge.privacy.model_file import face_model_path  # noqa: E402
from vcascade.edge.privacy.redaction import CameraRedaction, redact_regions  # noqa: E402

THRESHOLDS = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97)
MICRO_BATCH = 8
"""The demo worker's ``max_batch``: ROIs are assigned in micro-batches of this size, in arrival order."""
TRAVEL_MARGIN_S = 1.0
"""Added to the time offset between two cameras' segments to make their topology link's travel window."""
MIN_IOU = 0.5
"""Box IoU at or above which a camera's ROI takes a ground-truth identity."""
ANSWER_LAG = 2
"""The ROIs of micro-batch k carry the identity their track got in micro-batches up to k - ANSWER_LAG (the edge
has those answers; the previous micro-batch is still being answered), as ``track_identity_id``."""
CROP_THRESHOLD = 0.8
"""The demo head's ``match_threshold``: the crop's bar in the track rows, whose sweep threshold is the aggregate's
(``identity.tracks.match_threshold``); a lower sweep threshold is both."""
CENTROID_WINDOW = 20
"""``identity.centroid_window`` of the rows and replays that measure a centroid that forgets."""
GALLERY_SIZE, GALLERY_DIVERSITY = 8, 0.9
"""``identity.gallery`` of the rows and replays that match by exemplars besides the centroid (``+ gallery``)."""


@dataclass(frozen=True)
class ScenarioCamera:
    """A camera of the scenario: the clip's frames ``first_frame..last_frame - 1`` seen through ``view``."""

    name: str
    first_frame: int
    last_frame: int
    view: CameraViewConfig | None


def demo_view() -> CameraViewConfig:
    """The view of configs/demo.yaml's ``street-2``."""
    return CameraViewConfig.model_validate(yaml.safe_load(DEMO.read_text())["cameras"]["street-2"]["view"])


@dataclass(frozen=True)
class Scenario:
    """Cameras over the first ``frames`` frames of the clip, scoring ROIs of ``classes`` (None: every class)."""

    frames: int | None
    cameras: list[ScenarioCamera]
    classes: list[str] | None


def scenario(name: str) -> Scenario:
    """``segments``: three cameras, three time segments of the 250-frame clip, every class; ``quick``: two of
    them over the first 150 frames (CI); ``demo``: configs/demo.yaml's two cameras (the whole clip, recorded and
    through street-2's view) and the classes it routes to its embedder.

    Raises:
        KeyError: unknown name.
    """
    if name == "quick":
        return Scenario(150, [ScenarioCamera("cam-a", 0, 110, None), ScenarioCamera("cam-b", 40, 150, demo_view())],
                        None)
    if name == "demo":
        return Scenario(None, [ScenarioCamera("street-1", 0, 250, None),
                               ScenarioCamera("street-2", 0, 250, demo_view())], EMBEDDER_CLASSES)
    if name == "segments":
        return Scenario(None, [
            ScenarioCamera("cam-a", 0, 170, None),
            ScenarioCamera("cam-b", 60, 250, demo_view()),
            ScenarioCamera("cam-c", 30, 210, CameraViewConfig(crop_xyxy_frac=(0.0, 0.0, 0.7, 1.0), scale=1.3,
                                                              jpeg_quality=35)),
        ], None)
    raise KeyError(f"unknown scenario {name!r}; known: segments, quick, demo")


def scenario_topology(cameras: Sequence[ScenarioCamera], fps: float = 25.0) -> Topology:
    """Links between every two cameras, both ways: an object's source frame reaches camera j
    ``(first_j - first_i) / fps`` s after camera i, and while it is on both it is seen alternately, so the
    window is ``[0, |offset| + TRAVEL_MARGIN_S]``."""
    links = []
    for a, b in itertools.permutations(cameras, 2):
        links.append((a.name, b.name, 0.0, abs(a.first_frame - b.first_frame) / fps + TRAVEL_MARGIN_S))
    return Topology(links)


@dataclass(frozen=True)
class LabelledRoi:
    """One ROI of the scenario: its camera, camera PTS (ms), camera track, true identity (-1: none), crop,
    detection score."""

    camera: str
    pts_ms: float
    track_id: int
    truth: int
    crop: np.ndarray
    score: float = 1.0


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) IoU of (n, 4) and (m, 4) xyxy boxes."""
    lo, hi = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def true_identity(box: np.ndarray, truth: Detections, view: CameraViewConfig | None, frame_hw) -> int:
    """The ground-truth track whose box, in the camera's view, overlaps ``box`` most (IoU >= MIN_IOU), or -1."""
    known = truth.track_id >= 0
    if not known.any():
        return -1
    boxes = truth.xyxy[known] if view is None else view_boxes(truth.xyxy[known], view, *frame_hw)
    overlaps = iou(box[None].astype(np.float32), boxes.astype(np.float32))[0]
    best = int(np.argmax(overlaps))
    return int(truth.track_id[known][best]) if overlaps[best] >= MIN_IOU else -1


def scenario_rois(cameras: Sequence[ScenarioCamera], clip: Sequence[ClipFrame], truth: Sequence[Detections],
                  stride: int, detector, deployment, classes: list[str] | None, redact: Redact | None = None
                  ) -> list[LabelledRoi]:
    """Every camera's ROIs of ``classes`` (every ``stride``-th frame), labelled, in arrival order (camera PTS,
    then camera); ``redact``: the edge's face redaction before the crops are cut (None: none)."""
    frame_hw = clip[0].image.shape[:2]
    rois = []
    for cam in cameras:
        for roi in track_rois(clip[cam.first_frame:cam.last_frame], detector, deployment, cam.view, classes, redact):
            if (roi.frame - cam.first_frame) % stride == 0:
                label = true_identity(roi.xyxy, truth[roi.frame], cam.view, frame_hw)
                rois.append(LabelledRoi(cam.name, roi.pts_ms, roi.track_id, label, roi.crop, roi.score))
    return sorted(rois, key=lambda r: (r.pts_ms, r.camera))


def assign(assigner: Assigner, embeddings: np.ndarray, rois: Sequence[LabelledRoi]) -> np.ndarray:
    """Run ``assigner`` over the ROIs in micro-batches of :data:`MICRO_BATCH`, each ROI carrying the identity the
    edge knows for its track (:data:`ANSWER_LAG`); (N,) int64 identity ids."""
    ids = np.empty(len(rois), dtype=np.int64)
    known: dict[tuple[str, int], int] = {}
    starts = list(range(0, len(rois), MICRO_BATCH))
    for k, start in enumerate(starts):
        if k >= ANSWER_LAG:  # answers of an earlier micro-batch reach the edge
            done = starts[k - ANSWER_LAG]
            for r, ident in zip(rois[done:done + MICRO_BATCH], ids[done:done + MICRO_BATCH].tolist()):
                if r.track_id >= 0 and ident >= 1:
                    known[(r.camera, r.track_id)] = ident
        batch = rois[start:start + MICRO_BATCH]
        ids[start:start + len(batch)] = assigner(embeddings[start:start + len(batch)], [r.camera for r in batch],
                                                 np.array([r.pts_ms for r in batch]), [r.track_id for r in batch],
                                                 [r.score for r in batch],
                                                 [known.get((r.camera, r.track_id), -1) for r in batch])
    return ids


def assigners(threshold: float, workers: int, topology: Topology) -> list[Assigner]:
    """The modes compared: one worker; several with own galleries; several on the shared space, with and
    without topology pruning; one and several on the shared space matching tracks (their aggregates at
    ``threshold``, crops at :data:`CROP_THRESHOLD` or lower), with every look kept in the centroids, with a
    centroid of :data:`CENTROID_WINDOW` looks, and with galleries of :data:`GALLERY_SIZE` exemplars."""
    crop = min(CROP_THRESHOLD, threshold)
    tracked = [SharedSpace(crop, n, tracks=True, track_threshold=threshold, centroid_window=window)
               for window in (0, CENTROID_WINDOW) for n in (1, workers)]  # fmt: skip
    tracked += [SharedSpace(crop, n, tracks=True, track_threshold=threshold, gallery_size=GALLERY_SIZE,
                            gallery_diversity=GALLERY_DIVERSITY) for n in (1, workers)]  # fmt: skip
    return [OneWorker(threshold), SeveralWorkers(threshold, workers), SharedSpace(threshold, workers),
            SharedSpace(threshold, workers, topology), *tracked]


def sweep(embedders: Sequence[Embedder], rois: Sequence[LabelledRoi], workers: int, topology: Topology,
          thresholds: Sequence[float] = THRESHOLDS, embedded: dict[str, np.ndarray] | None = None
          ) -> list[dict[str, Any]]:  # fmt: skip
    """Quality of every (embedder, assigner, threshold), one row each, with comparisons per ROI; ``embedded``
    (when given) gets each embedder's (N, D) embeddings by name."""
    labelled = np.array([r.truth >= 0 for r in rois])
    truth = np.array([r.truth for r in rois])[labelled]
    camera = np.array([r.camera for r in rois])[labelled]
    rows = []
    for embedder in embedders:
        start = time.perf_counter()
        embeddings = embedder([r.crop for r in rois])
        embed_ms = (time.perf_counter() - start) * 1000.0 / max(len(rois), 1)
        if embedded is not None:
            embedded[embedder.name] = embeddings
        for threshold in thresholds:
            for assigner in assigners(threshold, workers, topology):
                predicted = assign(assigner, embeddings, rois)[labelled]
                getattr(assigner, "close", lambda: None)()
                rows.append({"embedder": embedder.name, "assigner": assigner.name, "threshold": threshold,
                             "embed_ms_per_roi": embed_ms, "comparisons_per_roi": assigner.comparisons / len(rois),
                             **quality(truth, predicted, camera)})
    return rows


def face_blur(model_dir: str | None, class_names: Sequence[str]) -> Redact:
    """The edge's face redaction with ``privacy.faces`` defaults (CenterFace at the frame's size, blur), as a
    function of a frame and its tracked detections (:class:`vcascade.edge.privacy.redaction.CameraRedaction`)."""
    faces = CenterFace(face_model_path(CENTERFACE_MODEL, model_dir))
    redaction = CameraRedaction(PrivacyConfig(faces={}), faces, class_names)
    return lambda image, detections: redact_regions(image, redaction.regions(image, detections), redaction.method)


def reid_section(name: str = "segments", stride: int = 1, workers: int = 2, model_dir: str | None = None,
                 blur_faces: bool = False, replay_counts: Sequence[int] = (), replay_threshold: float = 0.8,
                 replay_workers: Sequence[int] = (1,)) -> dict[str, Any]:  # fmt: skip
    """Build the scenario, embed, assign and score; returns ``scenario`` (counts), ``rows`` (:func:`sweep`) and
    ``replays`` (tools/reid_replays.py: the demo embedder's ROIs replayed into one store, per-crop and by tracks,
    without and with a centroid of :data:`CENTROID_WINDOW` looks, with ``replay_workers`` workers, reported after
    each of ``replay_counts``; empty without). ``blur_faces``: crops are cut from frames with their faces blurred,
    as an edge with ``privacy.faces`` sends them."""
    pin_threads()
    setting = scenario(name)
    clip = read_clip(max_frames=setting.frames)
    deployment = demo_deployment()
    detector = demo_detector(deployment, model_dir)
    truth = track_clip(clip, detector, deployment)
    cameras = setting.cameras
    redact = face_blur(model_dir, detector.class_names) if blur_faces else None
    rois = scenario_rois(cameras, clip, truth, stride, detector, deployment, setting.classes, redact)
    labelled = [r for r in rois if r.truth >= 0]
    seen_on = {t: {r.camera for r in labelled if r.truth == t} for t in {r.truth for r in labelled}}
    counts = {
        "name": name, "classes": setting.classes, "cameras": [{"name": c.name, "frames": [c.first_frame, c.last_frame],
                     "view": None if c.view is None else c.view.model_dump()} for c in cameras],
        "stride": stride, "blur_faces": blur_faces, "rois": len(rois), "labelled_rois": len(labelled),
        "true_identities": len(seen_on), "on_several_cameras": sum(len(c) > 1 for c in seen_on.values()),
    }
    embedders = [MobileNetEmbedder(deployment), ColourHistogramEmbedder()]
    embedded: dict[str, np.ndarray] = {}
    rows = sweep(embedders, rois, workers, scenario_topology(cameras), embedded=embedded)
    looks = variants(rois, embedded[embedders[0].name], embedders[0]) if replay_counts else []
    kinds = [dict(centroid_window=0), dict(centroid_window=CENTROID_WINDOW)]
    gallery = dict(gallery_size=GALLERY_SIZE, gallery_diversity=GALLERY_DIVERSITY)
    replayed = [row for n in replay_workers for tracks in (False, True) for kind in kinds + [gallery] * tracks
                if replay_counts
                for row in replays(rois, looks, replay_threshold, n, tracks, replay_counts, assign, **kind)]
    return {"scenario": counts, "rows": rows, "replays": replayed}


def print_section(result: dict[str, Any]) -> None:
    """The scenario and a table row per (embedder, assigner, threshold)."""
    s = result["scenario"]
    blurred = ", faces blurred" if s.get("blur_faces") else ""
    print(f"scenario {s['name']}{blurred}: {len(s['cameras'])} cameras {[c['name'] + str(c['frames']) for c in s['cameras']]}, every "
          f"{s['stride']} frame(s): {s['rois']} ROIs, {s['labelled_rois']} labelled, {s['true_identities']} true "
          f"identities ({s['on_several_cameras']} on several cameras)")
    print(f"{'embedder':14s} {'assigner':39s} {'thr':>5s} {'P':>6s} {'R':>6s} {'xcamP':>6s} {'xcamR':>6s} "
          f"{'IDF1':>6s} {'IDsw':>5s} {'frag':>5s} {'ids':>5s} {'cmp/ROI':>7s}")
    for row in result["rows"]:
        print(f"{row['embedder']:14s} {row['assigner']:39s} {row['threshold']:5.2f} {_f(row['precision'])} "
              f"{_f(row['recall'])} {_f(row['cross_precision'])} {_f(row['cross_recall'])} {_f(row['idf1'])} "
              f"{row['id_switches']:5d} {row['fragmentations']:5d} {row['identities']:5d} "
              f"{row['comparisons_per_roi']:7.1f}")
    if result.get("replays"):
        print(f"returning objects: {s['name']} replayed into one store, {result['replays'][0]['threshold']} "
              f"threshold, mobilenetv2")
        print_replays(result["replays"])


def _f(x: float) -> str:
    return "   nan" if math.isnan(x) else f"{x:6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["segments", "demo"], default="segments",
                        help="segments: 3 cameras, 3 time segments, every class; demo: configs/demo.yaml's cameras")
    parser.add_argument("--quick", action="store_true", help="two cameras, first 150 frames, every 4th frame (CI)")
    parser.add_argument("--stride", type=int, help="score the ROIs of every N-th frame (default 1; quick 4)")
    parser.add_argument("--workers", type=int, default=2, help="workers in the several-workers modes")
    parser.add_argument("--model-dir", help="folder holding yolox_nano.onnx")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--replays", help="replay counts to report, e.g. 1,5,10 (quick: 1,3; default: none)")
    parser.add_argument("--replay-threshold", type=float, default=0.8, help="match threshold of the replays")
    parser.add_argument("--replay-workers", default="1", help="worker counts of the replays, e.g. 1,2")
    parser.add_argument("--blur-faces", action="store_true",
                        help="blur faces in the crops as an edge with privacy.faces does (needs centerface.onnx)")
    args = parser.parse_args()
    stride = args.stride or (4 if args.quick else 1)
    counts = args.replays or ("1,3" if args.quick else "")
    result = reid_section("quick" if args.quick else args.scenario, stride, args.workers, args.model_dir,
                          args.blur_faces, [int(n) for n in counts.split(",") if n], args.replay_threshold,
                          [int(n) for n in args.replay_workers.split(",")])
    print_section(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

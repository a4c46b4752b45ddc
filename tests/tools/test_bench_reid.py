"""tools/bench_reid.py --quick on real footage, and its ground-truth labelling through a camera's view."""

from __future__ import annotations

import numpy as np

from tools.bench_reid import CENTROID_WINDOW, GALLERY_SIZE, THRESHOLDS, demo_view, face_blur, true_identity
from tools.reid_scenario import demo_deployment, demo_detector, read_clip, track_rois

from vcascade.core.config import CameraViewConfig
from vcascade.core.detections import Detections
from vcascade.edge.capture.views import view_boxes


def test_a_roi_takes_the_true_identity_whose_box_it_covers_in_the_view():
    truth = Detections(np.array([[10, 20, 110, 220], [300, 20, 400, 220]], np.float32), np.array([0.9, 0.8]),
                       np.array([0, 1]), np.array([4, 7]))
    view = demo_view()
    assert view.mirror and view.crop_xyxy_frac is not None  # the demo's street-2 is not the recorded view
    seen = view_boxes(truth.xyxy, view, 272, 640)
    assert true_identity(seen[1] + 2.0, truth, view, (272, 640)) == 7  # a detector's box is a few px off
    assert true_identity(seen[0], truth, view, (272, 640)) == 4
    assert true_identity(truth.xyxy[1], truth, CameraViewConfig(mirror=True), (272, 640)) == -1  # wrong side


def test_quick_run_scores_every_embedder_and_assigner_and_replays_into_one_store(run_quick):
    _, result = run_quick("bench_reid", 900)  # a loaded 2-core machine takes 5-7 min
    scenario = result["scenario"]
    assert [c["name"] for c in scenario["cameras"]] == ["cam-a", "cam-b"]
    assert scenario["cameras"][1]["view"]["mirror"] is True
    assert scenario["labelled_rois"] > 0.8 * scenario["rois"] and scenario["on_several_cameras"] >= 2
    rows = result["rows"]
    assert {r["embedder"] for r in rows} == {"mobilenetv2", "hsv-histogram"}
    modes = ["1 worker", "2 workers, own galleries", "2 workers, shared space", "2 workers, shared space + topology",
             "1 worker, shared space + tracks", "2 workers, shared space + tracks",
             f"1 worker, shared space + tracks + window {CENTROID_WINDOW}",
             f"2 workers, shared space + tracks + window {CENTROID_WINDOW}",
             f"1 worker, shared space + tracks + gallery {GALLERY_SIZE}",
             f"2 workers, shared space + tracks + gallery {GALLERY_SIZE}"]
    assert len(rows) == 2 * len(modes) * len(THRESHOLDS) and {r["assigner"] for r in rows} == set(modes)
    for row in rows:
        assert 0.0 <= row["idf1"] <= 1.0 and row["id_switches"] >= 0 and row["comparisons_per_roi"] >= 0
    best = {a: max(r["idf1"] for r in rows if r["embedder"] == "mobilenetv2" and r["assigner"] == a) for a in modes}
    assert best["1 worker"] > best["2 workers, own galleries"]  # issue 16: galleries per worker lose identities
    assert best["2 workers, shared space"] > best["2 workers, own galleries"]  # the shared space gets some back
    assert all(r["comparisons_per_roi"] > 0 for r in rows if r["assigner"] in modes[2:])  # counted by the space
    assert best["1 worker, shared space + tracks"] > best["1 worker"]  # a track's looks beat its crops alone
    # replays 1 and 3, per-crop and by tracks, each with every look kept and with a window (tracks: and with a
    # gallery): identities counted in
    # the store, the later replay's new ones are what it added, agreement and IDF1 are fractions
    rows = result["replays"]
    window = f" + window {CENTROID_WINDOW}"
    kinds = ("", window, " + tracks", " + tracks" + window, f" + tracks + gallery {GALLERY_SIZE}")
    assert [(r["assigner"], r["replay"]) for r in rows] == [
        (f"1 worker, shared space{kind}", n) for kind in kinds for n in (1, 3)]
    for first, third in (rows[k:k + 2] for k in range(0, len(rows), 2)):
        assert first["new"] == first["identities"] > 0 and third["identities"] >= first["identities"]
        assert 0 <= third["new"] <= third["identities"] - first["identities"]
        assert all(0.0 <= r["agreement"] <= 1.0 and 0.0 <= r["idf1"] <= 1.0 for r in (first, third))


def test_blur_faces_cuts_the_same_crops_from_frames_with_their_faces_blurred(models_dir):
    """``--blur-faces``: the ROIs of frames 100-129 of bikes.mp4 (faces at the back of the street) are the same
    detections, and the crops that hold a face differ from the plain ones only there."""
    deployment = demo_deployment()
    detector = demo_detector(deployment, str(models_dir))
    clip = read_clip(max_frames=130)[100:]
    plain = track_rois(clip, detector, deployment)
    blurred = track_rois(clip, detector, deployment, redact=face_blur(str(models_dir), detector.class_names))
    assert [(r.frame, r.track_id) for r in plain] == [(r.frame, r.track_id) for r in blurred] and plain
    changed = [not np.array_equal(p.crop, b.crop) for p, b in zip(plain, blurred)]
    assert any(changed) and not all(changed)  # some crops hold a face, others none

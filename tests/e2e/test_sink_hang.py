"""End to end: a webhook that accepts connections and never answers does not move the edge's frame age.

Real processes (`vcascade run`: edge with YOLOX-nano and ByteTrack, broker, worker with the MobileNetV2 embedder)
on the first 100 frames of bikes.mp4, every frame (a file camera: a detector that waits shows as frame age), with
the demo's small windows (``send_queue_max`` 16, ``overflow: block``): if a sink held the edge's link thread, ROIs
would stop leaving, the send queue would fill and the detector would wait, by the webhook's timeout (4 s) each
time (checked once by delivering on the link thread: the run did not finish within the test's 300 s).
The webhook is a real HTTP server that reads each request and never answers. Its records are counted: every record
the JSONL sink wrote was emitted to the webhook too, and each one is counted lost there (queue full at its bound, or
left at the drain deadline).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.demo import one_camera_demo
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e

WEBHOOK_TIMEOUT_S = 4.0
FRAMES = 100
FRAME_AGE_P99_LIMIT_MS = 2000.0
"""Half the webhook's timeout: one wait of the detector behind a hung POST would put four frames (the file slot's
depth) past it, which is more than 1% of the 100 frames."""


def _deployment(tmp_path: Path, free_port, webhook_url: str) -> Path:
    data = one_camera_demo(free_port, [
        {"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"},
        {"type": "webhook", "url": webhook_url, "timeout_s": WEBHOOK_TIMEOUT_S, "batch_max": 50, "batch_wait_s": 0.2,
         "max_attempts": 1000, "queue_max": 200, "drain_timeout_s": 1.0},
    ])
    data["cameras"]["street-1"]["max_frames"] = FRAMES
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_hanging_webhook_does_not_move_the_edges_frame_age(tmp_path, free_port, models_dir):
    receiver = Receiver(hang=True)
    try:
        config = _deployment(tmp_path, free_port, receiver.url)
        summary_path = tmp_path / "summary.json"
        proc = subprocess.run(
            [sys.executable, "-m", "vcascade", "run", str(config), "--model-dir", str(models_dir),
             "--summary-json", str(summary_path)],
            capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
        )
    finally:
        receiver.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (edge,) = [p for p in json.loads(summary_path.read_text())["processes"] if p["component"] == "edge"]
    camera = edge["cameras"]["street-1"]
    jsonl, webhook = edge["sinks"]["jsonl[0]"], edge["sinks"]["webhook[1]"]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()

    assert receiver.requests >= 1, "the webhook was never called"
    assert webhook["error"].startswith("timeout"), webhook
    assert camera["detected"] == FRAMES, "every frame was detected"
    assert camera["frame_age_p99_ms"] < FRAME_AGE_P99_LIMIT_MS, camera
    assert camera["sent"] == camera["results"] + sum(camera["drops"].values()) and camera["results"] > 0
    assert sum(jsonl["written"].values()) == len(lines) and jsonl["lost"] == {}
    assert webhook["written"] == {} and webhook["queued"] == 0
    assert sum(webhook["lost"].values()) == len(lines), webhook  # emitted = delivered (0) + dropped, per sink
    assert set(webhook["lost"]) <= {"queue_full", "shutdown"}
    kinds = {json.loads(line)["kind"] for line in lines}
    assert kinds == {"result", "camera_state"}, kinds

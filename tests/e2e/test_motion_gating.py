"""End to end with motion-gated detection (issue 32): ``vcascade run`` (edge, broker, worker as real processes) on a
static clip made from the sample footage. Still frames skip the detector but are still tracked, ROIs sent from
them (track refreshes on carried tracks) are answered like any other, and the books balance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.demo import one_camera_demo
from tests.records import result_lines
from tools.bench_motion import VIDEO, make_static_clip
from vcascade.core.runtime.resources import resolve

pytestmark = pytest.mark.e2e


def test_a_gated_camera_skips_still_frames_and_its_books_balance(tmp_path, free_port, models_dir):
    clip = make_static_clip(resolve(VIDEO), tmp_path / "static.mp4", segments=3, still_s=2.0)  # 3 x (50 + 25) frames
    data = one_camera_demo(free_port, [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}])
    data["cameras"]["street-1"].update(url=str(clip), motion={"max_gap_s": 1.0})
    data["edges"]["edge-1"]["roi"]["policy"] = {"mode": "track", "refresh_s": 0.5, "emit_tracked": True}
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "vcascade", "run", str(config), "--model-dir", str(models_dir),
         "--summary-json", str(summary_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (edge,) = [p for p in json.loads(summary_path.read_text())["processes"] if p["component"] == "edge"]
    camera = edge["cameras"]["street-1"]
    assert camera["frames"] == 225 and camera["detected"] + camera["still"] == 225
    assert camera["still"] >= 225 // 3, "the held stretches are still"
    assert camera["sent"] > 0 and camera["sent"] == camera["results"] + sum(camera["drops"].values())
    lines = result_lines(tmp_path / "results.jsonl")
    rois = [line for line in lines if line["status"] != "tracked"]
    assert len(rois) == camera["sent"]
    assert any(line["send_reason"] == "refresh" for line in rois), "carried tracks are refreshed over still frames"
    tracked = [line for line in lines if line["status"] == "tracked"]
    assert len({line["frame_seq"] for line in rois + tracked}) > camera["detected"], "still frames are tracked too"

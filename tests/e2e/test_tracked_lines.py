"""End to end with the track policy: each line carries its track id, each track is sent once, and the
detections not sent get `tracked` lines with the identity the center returned for their track.

Real processes (`vcascade run`): edge with YOLOX-nano and ByteTrack, broker, worker with the MobileNetV2
embedder, on the whole of bikes.mp4 (250 frames; detections start near frame 25). The whole clip, because a
result must come back while its track is still in view, and a loaded CI machine may take a second or two.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.demo import one_camera_demo
from tests.records import result_lines

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _deployment(tmp_path: Path, free_port) -> Path:
    data = one_camera_demo(free_port, [{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}])
    data["edges"]["edge-1"]["roi"]["policy"] = {"mode": "track", "refresh_s": 60, "emit_tracked": True}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_tracked_lines_carry_track_ids_and_cached_identities(tmp_path, free_port, models_dir):
    config = _deployment(tmp_path, free_port)
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "vcascade", "run", str(config), "--model-dir", str(models_dir),
         "--summary-json", str(summary_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (edge,) = [p for p in json.loads(summary_path.read_text())["processes"] if p["component"] == "edge"]
    tally = edge["cameras"]["street-1"]
    lines = result_lines(tmp_path / "results.jsonl")
    assert all(isinstance(line["track_id"], int) for line in lines), "every line carries track_id"

    rois = [line for line in lines if line["status"] != "tracked"]
    tracked = [line for line in lines if line["status"] == "tracked"]
    assert len(rois) == tally["sent"] == tally["results"] + sum(tally["drops"].values())
    assert tracked, "detections that were not sent must be followed"
    assert len(tracked) > 2 * len(rois), "the track policy sends far fewer ROIs than there are detections"

    results_by_track = defaultdict(list)
    for line in rois:
        assert line["track_id"] >= 0, "the track policy sends confirmed tracks only"
        if line["status"] == "ok":
            results_by_track[line["track_id"]].append(line)
    assert results_by_track
    assert len(rois) <= 2 * len(results_by_track), "a track is sent once, plus a few better crops"
    for track_id, sent in results_by_track.items():
        reasons = [line["send_reason"] for line in sorted(sent, key=lambda line: line["frame_seq"])]
        assert reasons[0] == "first" and set(reasons[1:]) <= {"better"}, (track_id, reasons)  # clip < refresh_s

    ok_by_roi = {line["roi_id"]: line for line in rois if line["status"] == "ok"}
    with_identity = [line for line in tracked if line["identity_id"] is not None]
    assert with_identity, (
        f"no tracked line got an identity: {len(tracked)} tracked lines, results for tracks "
        f"{ {t: [r['frame_seq'] for r in v] for t, v in results_by_track.items()} }"
    )
    for line in with_identity:
        source = ok_by_roi[line["identity_roi_id"]]
        assert source["track_id"] == line["track_id"] and source["identity_id"] == line["identity_id"]
        assert source["frame_seq"] < line["frame_seq"], "the identity comes from an earlier crop of the track"
        assert line["similarity"] == pytest.approx(source["similarity"], abs=1e-3)
    for line in tracked:
        if line["track_id"] < 0:
            assert line["identity_id"] is None, "a tentative detection has no track and no identity"

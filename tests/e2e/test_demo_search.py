"""scripts/demo_search.sh end to end (issue 29's acceptance): the script runs the demo (here its short form: the
demo's cameras on the first :data:`FRAMES` frames of bikes.mp4, the embedder's worker only, given as
``VCASCADE_DEMO_FILE``), then prints the timeline of an identity seen on both cameras with the paths of its
evidence images, which exist. Real processes, models and video."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo import short_demo, write_deployment

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 60
"""bikes.mp4 has no detection before frame 25; people and bikes cross both views from frame 30 on."""


def test_demo_search_prints_a_timeline_across_both_cameras_with_evidence_that_exists(tmp_path, free_port, models_dir):
    config = write_deployment(tmp_path, short_demo(tmp_path, free_port, FRAMES), "demo.yaml")
    env = {**os.environ, "VCASCADE_DEMO_FILE": str(config), "VCASCADE_VENV": sys.prefix, "COLUMNS": "400"}
    done = subprocess.run([str(REPO / "scripts" / "demo_search.sh"), "--model-dir", str(models_dir)],
                          capture_output=True, text=True, timeout=400, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = re.search(r"identity (\d+) was seen on both cameras; its timeline:", done.stderr)
    assert said, done.stderr[-3000:]
    table = done.stdout
    assert re.search(rf"identity {said[1]}\b", table)
    rows = [line for line in table.splitlines() if re.search(r"\d{4}-\d\d-\d\dT", line)]
    assert {camera for camera in ("street-1", "street-2") if any(camera in row for row in rows)} == {
        "street-1", "street-2"}, table
    paths = [Path(p) for p in re.findall(r"(/\S+?\.jpg)", table)]
    assert len(paths) >= 2 and all(path.is_file() and path.read_bytes()[:2] == b"\xff\xd8" for path in paths)

"""scripts/demo_events.sh on a short setting: the real deployment of configs/traffic.yaml (edge, broker, text
worker) with a local Mosquitto; the counts per line or zone, direction and class received over MQTT equal the
counts recomputed offline from the JSONL track lines, every event reached the subscriber, and each update
follows its event and names one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FRAMES = 100
"""Frames of bikes.mp4 (of 250): tracks start near frame 30 and the first crossings follow within 30 frames."""


def test_demo_events_counts_agree_over_mqtt(tmp_path, models_dir):
    if shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").is_file():
        pytest.fail("mosquitto not found (apt-get install mosquitto; scripts/test.sh installs it)")
    env = {**os.environ, "VCASCADE_PYTHON": sys.executable, "VCASCADE_TEST_MODELS": str(models_dir)}
    done = subprocess.run(
        [str(REPO / "scripts" / "demo_events.sh"), "--frames", str(FRAMES), "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=400, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "MQTT counts and offline counts agree" in done.stdout
    assert "line_cross  crossing" in done.stdout, done.stdout

    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    received = [json.loads(line) for line in (tmp_path / "mqtt.jsonl").read_text().splitlines()]
    events = [line for line in lines if line.get("kind") == "event"]
    assert events and {e["event_id"] for e in events} == {r["event_id"] for r in received if r["kind"] == "event"}
    assert len({e["event_id"] for e in events}) == len(events)
    for event in events:
        assert event["camera"] == "street" and event["type"] in ("line_cross", "zone_enter", "zone_exit", "zone_dwell")
        assert isinstance(event["track_id"], int) and event["track_id"] >= 0
        assert event["capture_ts_ms"] > 1.6e12 and event["stream_ts_ms"] >= 0
    position = {line["event_id"]: i for i, line in enumerate(lines) if line.get("kind") == "event"}
    for i, line in enumerate(lines):
        if line.get("kind") == "event_update":
            assert position[line["event_id"]] < i, "an update follows its event"
            event = lines[position[line["event_id"]]]
            assert event["identity_id"] is None and event["text"] is None
            assert line["track_id"] == event["track_id"] and line["roi_id"]

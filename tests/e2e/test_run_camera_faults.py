"""End to end (issue 18): what ``vcascade run`` shows for cameras that never work, beside one that does.

Real processes: a launcher with one edge, one broker and one worker (the MobileNetV2 embedder). ``street-1`` loops
bikes.mp4 paced as live; ``missing`` names a file that does not exist (it fails at once); ``refused`` is an RTSP URL
nothing listens on (a live source: it backs off and retries, never connecting). SIGINT (Ctrl-C) once the worker
has answered. Then the summary table keeps its columns (the state cells hold the state word only), the faults are
listed below it and as problems of the run (the never-connected camera too, which used to show as ``ended`` with
no problem line), ``--summary-json`` carries each camera's reason, and the run exits 1.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.demo import demo_data, free_ports, scrape_metrics, start_run, write_deployment
from tests.e2e.test_run_demo import _sample

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

START_TIMEOUT_S = 240.0
"""Until the worker has answered an ROI: torch and the embedder load on a busy machine."""


def _deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = demo_data()  # the embedder and worker-1 only
    street = data["cameras"].pop("street-1")
    data["cameras"] = {
        "street-1": {**street, "realtime": True, "loop": True, "detect_fps": 2},
        "missing": {**street, "url": str(tmp_path / "missing.mp4")},
        "refused": {**street, "url": f"rtsp://127.0.0.1:{free_port()}/cam", "open_timeout_s": 2},
    }
    data["edges"]["edge-1"].update(drain_timeout_s=5.0, sinks=[])
    return write_deployment(tmp_path, free_ports(data, free_port)), data


def test_failed_and_never_connected_cameras_are_listed_below_an_intact_table(tmp_path, free_port, models_dir):
    config, data = _deployment(tmp_path, free_port)
    summary = tmp_path / "summary.json"
    proc = start_run(config, models_dir, summary)
    try:
        deadline, worker_port = time.monotonic() + START_TIMEOUT_S, data["workers"]["worker-1"]["metrics_port"]
        while _sample(scrape_metrics(worker_port), "vcascade_worker_results_total") == 0:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, f"no result within {START_TIMEOUT_S} s"
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(out)
    assert proc.returncode == 1, out
    lines = out.splitlines()
    header = next(line for line in lines if "camera" in line and "accounted" in line)
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == [
        "camera", "state", "frames", "fps", "decoder", "sent", "results", "drops", "accounted", "p50 ms", "p99 ms"
    ]  # fmt: skip
    rows = {cells[0]: cells for line in lines if line.startswith("│ ")
            and len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 11}  # fmt: skip
    assert rows["missing"][1:3] == ["failed", "0"] and rows["refused"][1:3] == ["ended", "0"]
    assert rows["street-1"][1] == "ended" and int(rows["street-1"][2]) > 0
    text = " ".join(out.split())
    assert "problem: camera missing: failed (" in text and "missing.mp4" in text
    assert "problem: camera refused: ended (stopped) without reading a frame (never connected; last fault " \
        "connection_refused: " in text
    assert "problem: camera street-1" not in text
    cameras = next(p for p in json.loads(summary.read_text())["processes"] if p["component"] == "edge")["cameras"]
    assert cameras["missing"]["state"] == "failed" and cameras["missing"]["reason"] not in ("", "start")
    assert "missing.mp4" in cameras["missing"]["error"]
    assert cameras["refused"]["frames"] == 0 and cameras["refused"]["reason"] == "stopped"
    assert cameras["refused"]["fault"] == "connection_refused" and "rtsp://127.0.0.1:" in cameras["refused"]["detail"]

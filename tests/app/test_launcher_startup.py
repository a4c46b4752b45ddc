"""Deterministic start-up errors (issue 18, item 3): ``vcascade run`` refuses a missing or unfit model before it
starts any process, one line per model; and a component that still meets one (a model gone after the check) exits
with EXIT_NO_RESTART, which the launcher reports once and never restarts (it restarted a detector that failed its
contract check 5 times, about 30 s, and a worker without its text model 5 times, 76 s)."""

from __future__ import annotations

import time

import pytest

from tests.app.launcher_files import text_worker_only
from tests.demo import TEXT, write_deployment
from vcascade.app.cli import main
from vcascade.app.commands import EXIT_NO_RESTART
from vcascade.app.launcher import Launcher
from vcascade.core.config import Deployment

pytestmark = pytest.mark.timeout(180)


def test_run_refuses_each_missing_or_unfit_model_in_one_line_before_starting_anything(
    tmp_path, free_port, models_dir, capsys
):
    data = text_worker_only(free_port, "absent-text.onnx")
    data["edges"]["edge-1"]["detector"] = {"type": "yolov8", "path": str(models_dir / "yolox_nano.onnx")}
    status = tmp_path / "status.json"
    started = time.monotonic()
    path = write_deployment(tmp_path, data)
    code = main(["run", str(path), "--model-dir", str(models_dir), "--status-file", str(status)])
    took_s = time.monotonic() - started
    lines = capsys.readouterr().err.splitlines()
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith("vcascade: edges.edge-1.detector: ") and "looks transposed" in lines[0]
    assert lines[1].startswith(f"vcascade: recognizers.{TEXT}.model: recognizer model 'absent-text.onnx' not found")
    assert not status.exists() and took_s < 30  # no process was started (it writes the status file at once)


def test_a_component_failing_its_start_deterministically_is_reported_once_and_not_restarted(
    tmp_path, free_port, models_dir
):
    data = text_worker_only(free_port, "absent-text.onnx")  # what run's check would refuse; the launcher alone
    data["supervision"] = {"max_restarts": 5, "window_s": 60, "backoff_initial_s": 0.1, "backoff_max_s": 0.1}
    dep = Deployment.model_validate(data)
    launcher = Launcher(dep, write_deployment(tmp_path, data), str(models_dir), "WARNING")
    try:
        launcher.start()  # brokers, then the worker, which fails; the edges are never started
        deadline = time.monotonic() + 60
        while not launcher.center_failed() and time.monotonic() < deadline:
            launcher.poll(0.2)
            launcher.supervise()
        time.sleep(1.0)  # would be past any restart's backoff (0.1 s)
        launcher.poll(0.2)
        launcher.supervise()
    finally:
        launcher.stop()
    worker = launcher.components[("worker", "worker-2")]
    assert [run["exit_code"] for run in worker.history] == [EXIT_NO_RESTART]
    assert worker.tracker.restarts == 0 and worker.start_failed
    assert "absent-text.onnx" in worker.history[0]["snapshot"]["error"]
    assert launcher.center_failed() == ["worker worker-2 stopped after a start-up error"]
    assert ("edge", "edge-1") not in launcher.components

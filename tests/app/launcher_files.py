"""Deployment files for the launcher's tests: the demo with one text worker whose model can be made absent, so
that the broker serves and the worker fails its start (no edge is started), at a fraction of a full run's cost."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.demo import TEXT, demo_data


def write_file(tmp_path: Path, data: dict) -> Path:
    """``data`` as ``tmp_path/deploy.yaml``."""
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def text_worker_only(free_port, text_model: str) -> dict:
    """The demo with its text recognizer on ``text_model`` and worker-2 alone; every port free."""
    data = demo_data(both_recognizers=True)
    data["recognizers"][TEXT]["model"] = text_model
    data["workers"] = {"worker-2": {**data["workers"]["worker-2"], "metrics_port": free_port()}}
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["edges"]["edge-1"].update(metrics_port=free_port())
    data["edges"]["edge-1"].pop("sinks", None)
    data["edges"]["edge-1"]["roi"]["routes"] = [{"recognizer": TEXT}]
    return data

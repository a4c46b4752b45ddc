"""A deployment for the launcher's tests: the demo with one text worker whose model can be made absent, so that the
broker serves and the worker fails its start (no edge is started), at a fraction of a full run's cost."""

from __future__ import annotations

from tests.demo import TEXT, demo_data, free_ports


def text_worker_only(free_port, text_model: str) -> dict:
    """The demo with its text recognizer on ``text_model`` and worker-2 alone; every port free."""
    data = demo_data(both_recognizers=True)
    data["recognizers"][TEXT]["model"] = text_model
    data["workers"] = {"worker-2": data["workers"]["worker-2"]}
    data["edges"]["edge-1"].pop("sinks", None)
    data["edges"]["edge-1"]["roi"]["routes"] = [{"recognizer": TEXT}]
    return free_ports(data, free_port)

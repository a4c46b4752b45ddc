"""Camera state changes become ``camera_state`` lines through a listener per edge (edge/capture/state.py) and the
way back (:meth:`vcascade.edge.way_back.WayBack.camera_state`)."""

from __future__ import annotations

import time

from vcascade.edge.capture.state import CameraStateMachine, listen_states
from vcascade.edge.metrics import CameraTelemetry
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack


def test_each_state_change_of_the_edges_cameras_reaches_its_listener_as_a_record():
    records: list[dict] = []
    other_edge: list[dict] = []
    remove = listen_states("edge-states", WayBack(OutputLines([type("S", (), {"write": lambda _, r: records.append(r)})()])).camera_state)
    remove_other = listen_states("edge-other", lambda camera, step: other_edge.append({}))
    machine = CameraStateMachine(CameraTelemetry("edge-states", "gate"))
    before_ms = time.time() * 1000.0
    machine.to("streaming", "opened")
    machine.to("streaming", "opened")  # no change: no record
    machine.to("stalled", "read_timeout", "rtsp://user:secret@cam/stream: no frame for 5 s")
    remove()
    machine.to("backing_off", "reconnect")  # after removal: not told
    remove_other()
    assert [(r["state"], r["reason"]) for r in records] == [("streaming", "opened"), ("stalled", "read_timeout")]
    assert all(r["kind"] == "camera_state" and r["camera"] == "gate" for r in records)
    assert "secret" not in records[1]["detail"] and "no frame for 5 s" in records[1]["detail"]
    assert before_ms - 1.0 <= records[0]["wall_ts_ms"] <= time.time() * 1000.0 + 1.0
    assert other_edge == []


def test_a_failing_listener_does_not_stop_the_camera():
    def broken(camera, step):
        raise RuntimeError("listener bug")

    remove = listen_states("edge-broken", broken)
    machine = CameraStateMachine(CameraTelemetry("edge-broken", "gate"))
    assert machine.to("streaming", "opened")
    remove()
    assert machine.state == "streaming"

"""``vcascade camera add --wait-s`` (issue 18, item 4): the command waits for the added camera's first real state
and exits 1 with the reason when it fails. A real control server and camera set of edge-1 run in this process
(this test plays the edge's loop thread); the command runs through the CLI against them."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
import zmq

from tests.demo import demo_data
from vcascade.app.cli import main
from vcascade.core.config import Deployment
from vcascade.edge.camera_set import CameraSet
from vcascade.edge.control import ControlServer
from vcascade.edge.capture.frames import FrameSlots
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack

pytestmark = pytest.mark.timeout(90)
EDGE = "edge-1"


@pytest.fixture
def config(tmp_path, free_port):
    """The path of a deployment whose edge-1 has a running control server (no cameras to start with)."""
    data = demo_data()
    data["edges"][EDGE]["control_port"] = free_port()
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = Deployment.model_validate(data)
    ctx = zmq.Context()
    link = BrokerLink(EdgeSettings.from_deployment(dep, EDGE), ctx, WayBack(OutputLines([])))  # not started: only its books are read
    node = SimpleNamespace(
        link=link, add_camera=lambda camera, cfg: link.add_camera(camera), refusal=lambda camera: None
    )  # no detector here
    cameras = CameraSet(EDGE, FrameSlots(), node)
    server = ControlServer(EdgeSettings.from_deployment(dep, EDGE), ctx, cameras)
    server.start()
    stop = threading.Event()
    loop = threading.Thread(target=_loop, args=(stop, server, cameras))
    loop.start()
    yield path
    stop.set()
    loop.join()
    for reader in cameras.readers():
        reader.stop.set()
    server.close()
    ctx.destroy(linger=0)


def _loop(stop: threading.Event, server: ControlServer, cameras: CameraSet) -> None:
    """The edge's loop thread as the control socket sees it: apply requests, take the frames the readers offer."""
    while not stop.wait(0.02):
        server.apply_pending()
        while cameras.slots.take(0.0) is not None:
            pass


def _add(config: Path, name: str, url: str, *extra: str) -> int:
    return main(["camera", "add", "--config", str(config), "--edge", EDGE, "--name", name, "--url", url, *extra])


def test_adding_a_missing_file_exits_1_with_the_reason(config, tmp_path, capsys):
    code = _add(config, "gone", str(tmp_path / "nowhere.mp4"), "--wait-s", "20")
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert err.startswith("vcascade camera add: gone: failed (") and "nowhere.mp4" in err
    shown = json.loads(out)["gone"]
    assert shown["state"] == "failed" and shown["reason"] != "start" and "nowhere.mp4" in shown["error"]


def test_adding_a_refused_rtsp_camera_exits_1_once_it_backs_off(config, free_port, capsys):
    url = f"rtsp://127.0.0.1:{free_port()}/cam"  # nothing listens there: the connection is refused
    code = _add(config, "dead", url, "--wait-s", "20", "--set", "open_timeout_s=5")
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert err.startswith("vcascade camera add: dead: backing_off (")
    assert json.loads(out)["dead"]["state"] == "backing_off"


def test_adding_a_good_file_exits_0_once_it_streams(config, bikes_path, capsys):
    code = _add(config, "bikes", str(bikes_path), "--wait-s", "20", "--set", "max_frames=20")
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert json.loads(out)["bikes"]["state"] in ("streaming", "ended") and err == ""


def test_without_a_wait_the_addition_alone_decides_the_exit_code(config, tmp_path, capsys):
    code = _add(config, "gone", str(tmp_path / "nowhere.mp4"), "--wait-s", "0")
    out, err = capsys.readouterr()
    assert code == 0 and "gone" in json.loads(out) and err == ""  # the old behaviour, on request

"""What a camera URL may make the edge open (issue 28, item 8), through the real FFmpeg open of ``check --deep``'s
probe: a text file is refused as not_video; a local playlist cannot reach the network; a redirect to another host
is refused unless allowed; hosts outside edges.<name>.camera_hosts and schemes of no camera kind are refused; each
refusal has its reason and is counted."""

from __future__ import annotations

import http.server
import threading

import pytest
from prometheus_client import REGISTRY

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.probe import probe_camera
from vcascade.edge.capture.url_policy import allow_hosts, host_of

pytestmark = pytest.mark.timeout(120)


def probe(url: str):
    return probe_camera(CameraConfig(url=url, edge="edge-url"), 5.0)


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("vcascade_edge_camera_url_refusals_total",
                                     {"edge": "edge-url", "reason": reason}) or 0.0  # fmt: skip


@pytest.fixture(autouse=True)
def _no_allow_list():
    allow_hosts(None)
    yield
    allow_hosts(None)


class _Server:
    """A real HTTP server on 127.0.0.1 that answers every GET with ``answer(path)`` -> (status, headers, body) and
    records the paths asked."""

    def __init__(self, answer) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.paths.append(self.path)
                status, headers, body = answer(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_text_file_is_refused_as_not_video(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("lorem ipsum dolor sit amet " * 400)  # FFmpeg's tty demuxer "decodes" this as video
    before = refused("not_video")
    result = probe(str(text))
    assert (result.ok, result.reason) == (False, "not_video"), result
    assert refused("not_video") == before + 1


def test_a_local_playlist_cannot_make_the_edge_fetch_a_network_address(tmp_path):
    """A guard: FFmpeg's HLS demuxer refuses this by itself today; the file camera's protocol_whitelist (file)
    and demuxer list (no hls) refuse it whatever FFmpeg's version does."""
    server = _Server(lambda path: (200, {"Content-Type": "video/mp2t"}, b"\x47" * 188))
    try:
        playlist = tmp_path / "cam.m3u8"
        playlist.write_text("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n"
                            f"http://127.0.0.1:{server.port}/internal/secret.ts\n#EXT-X-ENDLIST\n")
        result = probe(str(playlist))
    finally:
        server.close()
    assert not result.ok and server.paths == [], (result, server.paths)


def test_a_redirect_to_another_host_is_refused_unless_allowed():
    server = _Server(lambda path: (302, {"Location": "http://127.0.0.2:9/admin"}, b""))
    try:
        before = refused("redirect_refused")
        result = probe(f"http://127.0.0.1:{server.port}/cam.mjpg")
        assert (result.ok, result.reason) == (False, "redirect_refused"), result
        assert refused("redirect_refused") == before + 1
        allow_hosts(["127.0.0.0/8"])
        result = probe(f"http://127.0.0.1:{server.port}/cam.mjpg")
        assert not result.ok and result.reason != "redirect_refused", result  # followed: nothing listens there
    finally:
        server.close()


def test_hosts_outside_the_allow_list_and_schemes_of_no_camera_kind_are_refused(free_port):
    allow_hosts(["10.20.0.0/16", "cam-1.example.com"])
    before = refused("host_not_allowed")
    for url in (f"rtsp://127.0.0.1:{free_port()}/cam", "http://admin:pw@169.254.169.254/latest/meta-data/"):
        result = probe(url)
        assert (result.ok, result.reason) == (False, "host_not_allowed"), result
        assert "pw" not in result.detail
    assert refused("host_not_allowed") == before + 2
    for url in ("ftp://127.0.0.1/cam", "gopher://127.0.0.1/x", "concat:a.mp4|b.mp4://x"):
        assert probe(url).reason == "protocol_not_allowed", url


def test_the_host_is_found_as_ffmpeg_finds_it():
    assert host_of("rtsp://admin:p@ss@10.0.0.5:554/s") == "10.0.0.5"
    assert host_of("http://[fe80::1]:80/x") == "fe80::1"
    assert host_of("http://Cam.Example.com/x?y=@evil") == "cam.example.com"


def test_check_deep_holds_each_camera_to_its_edges_camera_hosts(tmp_path, free_port):
    import yaml

    from tests.demo import demo_data
    from vcascade.app.preflight import camera_problems
    from vcascade.core.config import load_config

    data = demo_data()
    data["edges"]["edge-1"]["camera_hosts"] = ["10.20.0.0/16"]
    data["cameras"]["street-1"]["url"] = f"rtsp://admin:Pw9secret@127.0.0.1:{free_port()}/cam"
    data["cameras"]["street-1"]["edge"] = "edge-1"
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    problems = camera_problems(load_config(path), 5.0)
    (line,) = [p for p in problems if p.startswith("cameras.street-1:")]
    assert "host_not_allowed" in line and "Pw9secret" not in line, line

"""Camera readers on real video: stream timestamps, end of file, bad files, and a real RTSP server."""

import functools
import http.server
import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader, SourceError, open_source

REPO = Path(__file__).resolve().parents[3]


def test_file_every_frame_with_stream_timestamps(read_all, bikes_path):
    reader, frames = read_all(bikes_path, max_frames=30)
    assert reader.state == "ended" and reader.error is None
    assert [f.seq for f in frames] == list(range(30))
    assert [f.stream_ts_ms for f in frames[:3]] == [0.0, 40.0, 80.0]  # 25 fps file: PTS 40 ms apart
    assert frames[0].image.shape == (272, 640, 3)
    assert all(b.capture_s >= a.capture_s for a, b in zip(frames, frames[1:]))


def test_whole_file_reaches_its_end(read_all, bikes_path):
    reader, frames = read_all(bikes_path)
    assert reader.state == "ended" and len(frames) == 250


@pytest.mark.parametrize(
    ("content", "expected", "reason"),
    [(None, "no such file", "missing_file"), (b"", "file is empty", "empty_file"),
     (b"this is not a video" * 100, "cannot open", "invalid_data")],
)
def test_bad_files_fail_that_camera_with_a_clear_error(read_all, tmp_path, content, expected, reason):
    path = tmp_path / "cam.mp4"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SourceError, match=expected) as info:
        open_source(CameraConfig(url=str(path), edge="e"))
    assert info.value.reason == reason
    reader, frames = read_all(path)
    assert reader.state == "failed" and expected in reader.error and frames == []
    assert reader.reason == reason


def test_missing_package_resource_is_a_camera_error(read_all):
    reader, _ = read_all("package://no-such-dist/video.mp4")
    assert reader.state == "failed" and "not installed" in reader.error


@pytest.fixture
def rtsp_url(bikes_path, free_port):
    """A real RTSP server (gst-rtsp-server, run by the system Python) replaying bikes.mp4."""
    python = shutil.which("python3", path="/usr/bin")
    port = free_port()
    proc = subprocess.Popen(
        [python or "/usr/bin/python3", str(REPO / "tools" / "rtsp_server.py"), "--port", str(port), str(bikes_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        pytest.fail(f"RTSP server did not start (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 "
                    f"gstreamer1.0-plugins-good gstreamer1.0-plugins-bad): {line} {proc.stderr.read()}")
    yield line.split()[1]
    proc.kill()
    proc.wait()


def test_rtsp_camera_is_live_with_stream_timestamps(rtsp_url):
    cfg = CameraConfig(url=rtsp_url, edge="e", rtsp_transport="tcp", max_frames=20)
    slots, stop = FrameSlots(), threading.Event()
    reader = CameraReader("edge", "cam", cfg, slots, stop)
    assert reader.policy == "newest"
    reader.start()
    frames = []
    while not slots.finished():
        frame = slots.take(0.5)
        if frame is not None:
            frames.append(frame)
            time.sleep(0.08)  # a detector slower than the 25 fps stream: frames are skipped, not queued
    reader.join(timeout=15)
    assert reader.state == "ended" and reader.frames == 20
    assert frames and frames[0].image.shape == (272, 640, 3)
    assert len(frames) + slots.skipped["cam"] == 20 and slots.skipped["cam"] > 0
    ts = [f.stream_ts_ms for f in frames]
    assert ts == sorted(ts) and ts[-1] - ts[0] > 0


def test_rtsp_unreachable_fails_that_camera(free_port):
    port = free_port()
    with pytest.raises(SourceError, match="cannot open") as info:
        open_source(CameraConfig(url=f"rtsp://user:secret@127.0.0.1:{port}/cam", edge="e"))
    assert "secret" not in str(info.value) and "***@" in str(info.value)
    assert info.value.reason == "connection_refused"


def test_rtsp_over_udp_streams_frames(rtsp_server, cameras, wait_for):
    reader = cameras("udp", url=rtsp_server.url, rtsp_transport="udp", max_frames=10)
    frames = []
    while len(frames) < 10 and wait_for(lambda: reader.state != "connecting", 30):
        frame = cameras.slots.take(1.0)
        if frame is None and cameras.slots.finished():
            break
        if frame is not None:
            frames.append(frame)
    assert wait_for(lambda: reader.state == "ended", 30) and reader.machine.reason == "max_frames"
    assert frames and frames[0].image.shape == (120, 160, 3)


def test_unreachable_live_camera_keeps_retrying_without_leaking_credentials(cameras, free_port, wait_for, caplog):
    url = f"rtsp://admin:hunter2@127.0.0.1:{free_port()}/cam"
    with caplog.at_level(logging.INFO):
        reader = cameras("gone", url=url, open_timeout_s=1.0, backoff_initial_s=0.05, backoff_max_s=0.2)
        assert wait_for(lambda: reader.reconnects >= 3, 30)
    steps = [(t.target, t.reason) for t in reader.machine.history()]
    assert steps[:3] == [("backing_off", "connection_refused"), ("connecting", "retry"),
                         ("backing_off", "connection_refused")]
    assert reader.fault == "connection_refused" and "Connection refused" in reader.detail
    assert reader.error is None and reader.state in ("connecting", "backing_off")  # live: never gives up
    assert "hunter2" not in caplog.text and "***@127.0.0.1" in caplog.text


def _read_live(cameras, wait_for, name: str, url: str, n: int) -> list:
    reader = cameras(name, url=url, max_frames=n, open_timeout_s=20.0, read_timeout_s=20.0)
    assert wait_for(lambda: reader.state == "ended", 60), reader.machine.history()
    assert reader.machine.reason == "max_frames" and reader.error is None
    frames = []
    while (frame := cameras.slots.take(0.1)) is not None:
        frames.append(frame)
    return frames


def test_http_mjpeg_stream(cameras, wait_for, free_port, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/cam.mjpg"
    server = subprocess.Popen(  # ffmpeg's own HTTP server, one client, multipart JPEG like an IP camera
        ["ffmpeg", "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-t", "30",
         "-f", "mpjpeg", "-q:v", "5", "-listen", "1", url], stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)  # let it listen; the reader retries anyway if it is not up yet
        frames = _read_live(cameras, wait_for, "mjpeg", url, 10)
    finally:
        server.kill()
        server.wait()
    assert frames and frames[-1].image.shape == (120, 160, 3)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_http_hls_playlist(cameras, wait_for, tmp_path):
    subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-t", "4", "-c:v", "libx264",
         "-preset", "ultrafast", "-g", "25", "-f", "hls", "-hls_time", "1", "-hls_list_size", "0",
         str(tmp_path / "index.m3u8")], check=True,
    )
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            frames = _read_live(cameras, wait_for, "hls", f"http://127.0.0.1:{server.server_port}/index.m3u8", 30)
        finally:
            server.shutdown()
    assert frames and frames[-1].image.shape == (120, 160, 3) and frames[-1].stream_ts_ms > 0

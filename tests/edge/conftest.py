"""Edge test fixtures: a real, controllable RTSP server and test videos made with ffmpeg."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.capture.source import CameraReader

REPO = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT_S = 30.0


def ffmpeg(*args: str) -> None:
    """Run ffmpeg quietly with one thread; fails the test with its stderr if it fails."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        pytest.fail("ffmpeg not found (apt-get install ffmpeg)")
    done = subprocess.run([exe, "-v", "error", "-y", *args, "-threads", "1"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"ffmpeg {' '.join(args)} failed: {done.stderr}")


def make_video(path: Path, seconds: float, size: str = "160x120", rate: int = 25, extra: tuple[str, ...] = ()) -> Path:
    """An H.264 test pattern (no B-frames, keyframe every 10 frames) written to ``path``."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}", "-t", str(seconds), *extra,
           "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-g", "10", "-pix_fmt", "yuv420p", str(path))
    return path


@pytest.fixture(scope="session")
def long_video(tmp_path_factory) -> Path:
    """A 120 s, 25 fps, 160x120 H.264 MP4: longer than any test streams it."""
    return make_video(tmp_path_factory.mktemp("videos") / "long.mp4", 120)


class RtspServer:
    """tools/rtsp_server.py (gst-rtsp-server under the system Python) on a loopback port, under test control.

    ``kill()`` ends it (SIGKILL), ``freeze()``/``thaw()`` stop and continue it (SIGSTOP/SIGCONT: connections stay
    open, no data flows), ``start()`` runs it again on the same port. With ``user``, the server requires Basic
    authentication with ``user``/``password``; ``url`` then carries them.
    """

    def __init__(self, video: Path, port: int, path: str = "/cam", user: str = "", password: str = "") -> None:
        self.video, self.port, self.path, self.user, self.password = video, port, path, user, password
        self.url = f"rtsp://{user}:{password}@127.0.0.1:{port}{path}" if user else f"rtsp://127.0.0.1:{port}{path}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the server and wait until it listens. Fails the test if it does not."""
        python = shutil.which("python3", path="/usr/bin") or "/usr/bin/python3"
        cmd = [python, str(REPO / "tools" / "rtsp_server.py"), "--port", str(self.port), "--path", self.path,
               str(self.video)]
        if self.user:
            cmd += ["--user", self.user, "--password", self.password]
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:  # the port can still be held for a moment after a kill
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.1, deadline - time.monotonic()))
            line = self.proc.stdout.readline() if ready else ""
            if line.startswith("READY"):
                return
            self.kill()
            if time.monotonic() > deadline:
                pytest.fail(f"RTSP server did not start (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 "
                            f"gstreamer1.0-plugins-good gstreamer1.0-plugins-bad): {line!r}")
            time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL the server (a crash: clients see the connection drop)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP: sockets stay open, nothing is sent."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def rtsp_server(long_video, free_port) -> Iterator[RtspServer]:
    """A started :class:`RtspServer` replaying :func:`long_video`; killed at the end of the test."""
    yield from _serve(RtspServer(long_video, free_port()))


@pytest.fixture
def rtsp_auth_server(long_video, free_port) -> Iterator[RtspServer]:
    """Like :func:`rtsp_server`, requiring Basic authentication as ``viewer`` / ``s3cret``."""
    yield from _serve(RtspServer(long_video, free_port(), user="viewer", password="s3cret"))


def _serve(server: RtspServer) -> Iterator[RtspServer]:
    server.start()
    yield server
    server.kill()
    if server.proc is not None:
        server.proc.stdout.close()
        server.proc.stderr.close()


class Consumer(threading.Thread):
    """Takes frames from the slots like the detector would, optionally slower (``delay_s`` per frame)."""

    def __init__(self, slots: FrameSlots, delay_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.slots, self.delay_s = slots, delay_s
        self.frames: list[tuple[float, Frame]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            frame = self.slots.take(0.1)
            if frame is not None:
                self.frames.append((time.perf_counter(), frame))
                self.stop.wait(self.delay_s)

    def of(self, camera: str) -> list[tuple[float, Frame]]:
        """(take time, frame) of one camera's frames so far."""
        return [item for item in list(self.frames) if item[1].camera == camera]


@pytest.fixture
def cameras() -> Iterator[Callable[..., CameraReader]]:
    """A factory starting CameraReaders on one shared FrameSlots (``.slots``); all stopped at the end."""
    slots, stop, readers = FrameSlots(), threading.Event(), []

    def start(name: str, **cfg) -> CameraReader:
        reader = CameraReader("edge", name, CameraConfig(edge="e", **cfg), slots, stop)
        reader.start()
        readers.append(reader)
        return reader

    start.slots = slots
    yield start
    stop.set()
    for reader in readers:
        reader.join(timeout=15)


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes (generous timeouts: CI is slow)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Callable[..., bool]:
    """:func:`wait_for` as a fixture (test modules cannot import conftest under --import-mode=importlib)."""
    return wait_for


@pytest.fixture
def consumer() -> Iterator[Callable[..., Consumer]]:
    """A factory of started :class:`Consumer` threads; all stopped at the end of the test."""
    started: list[Consumer] = []

    def start(slots: FrameSlots, delay_s: float = 0.0) -> Consumer:
        thread = Consumer(slots, delay_s)
        thread.start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        thread.stop.set()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def short_video(tmp_path_factory) -> Path:
    """A 1 s, 10 fps (10 frames, PTS 0, 100, ... 900 ms), 160x120 H.264 MP4."""
    return make_video(tmp_path_factory.mktemp("videos") / "short.mp4", 1, rate=10)


def _read_all(url: Path | str, timeout_s: float = 30.0, **cfg):
    """Run one CameraReader to its end; returns (reader, frames)."""
    slots, stop = FrameSlots(), threading.Event()
    reader = CameraReader("edge", "cam", CameraConfig(url=str(url), edge="e", **cfg), slots, stop)
    reader.start()
    frames, deadline = [], time.monotonic() + timeout_s
    while not slots.finished() and time.monotonic() < deadline:
        frame = slots.take(0.2)
        if frame is not None:
            frames.append(frame)
    stop.set()
    reader.join(timeout=15)
    return reader, frames


@pytest.fixture(name="read_all")
def read_all_fixture() -> Callable[..., tuple[CameraReader, list[Frame]]]:
    """``read_all(url, timeout_s=30, **camera_config)``: run one CameraReader to its end -> (reader, frames)."""
    return _read_all

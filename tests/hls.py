"""Real HLS sources for tests: a bikes.mp4 transport stream cut for 1 s segments, python's http.server serving a
folder, a live playlist written by FFmpeg's HLS muxer, a VOD playlist and a stale one (its writer gone)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def hls_source(bikes_path: Path, out: Path) -> Path:
    """bikes.mp4 (640x272, 25 fps, 250 frames) as MPEG-TS with a keyframe every 25 frames: 1 s HLS segments."""
    subprocess.run([_ffmpeg(), "-v", "error", "-y", "-i", str(bikes_path), "-an", "-c:v", "libx264", "-preset",
                    "ultrafast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0", "-threads", "1", "-f", "mpegts",
                    str(out)], check=True)
    return out


def _ffmpeg() -> str:
    exe = shutil.which("ffmpeg")
    if exe is None:
        pytest.fail("ffmpeg not found (apt-get install ffmpeg)")
    return exe


class HttpServer:
    """``python -m http.server`` on a free loopback port serving ``root``; its request log (one line per request)
    goes to ``root/../http-<port>.log``."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.log_path = root.parent / f"http-{port}.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                          "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        pytest.fail("http.server did not start")

    def requests(self) -> list[str]:
        """The request lines served so far (``GET /path HTTP/1.1``)."""
        return [line.split('"')[1] for line in self.log_path.read_text().splitlines() if line.count('"') >= 2]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class LiveWriter:
    """A real FFmpeg HLS muxer writing a live playlist (1 s segments, 5 listed) from a looped clip at its own pace
    (``-re``); ``append=True`` continues an existing playlist's numbering (a restarted writer)."""

    def __init__(self, source: Path, playlist: Path, append: bool = False) -> None:
        flags = "delete_segments+append_list" if append else "delete_segments"
        self.playlist = playlist
        self.proc = subprocess.Popen(
            [_ffmpeg(), "-v", "error", "-re", "-stream_loop", "-1", "-i", str(source), "-c", "copy", "-f", "hls",
             "-hls_time", "1", "-hls_list_size", "5", "-hls_flags", flags, str(playlist)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def segments(self) -> int:
        try:
            return sum(1 for line in self.playlist.read_text().splitlines() if line.endswith(".ts"))
        except OSError:
            return 0

    def stop(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=10)


def vod_playlist(source_ts: Path, root: Path, seconds: int = 3) -> str:
    """A VOD playlist (``#EXT-X-ENDLIST``) of the first ``seconds`` of ``source_ts`` under ``root/vod``; its path."""
    (root / "vod").mkdir()
    subprocess.run([_ffmpeg(), "-v", "error", "-i", str(source_ts), "-t", str(seconds), "-c", "copy", "-f", "hls",
                    "-hls_time", "1", "-hls_playlist_type", "vod", str(root / "vod" / "index.m3u8")], check=True)
    return "vod/index.m3u8"


def stale_playlist(source_ts: Path, root: Path, seconds: int = 3) -> str:
    """A live playlist (no ``#EXT-X-ENDLIST``) of ``seconds`` 1 s segments under ``root/stale`` whose writer is gone;
    its path below ``root``."""
    (root / "stale").mkdir()
    subprocess.run([_ffmpeg(), "-v", "error", "-i", str(source_ts), "-t", str(seconds), "-c", "copy", "-f", "hls",
                    "-hls_time", "1", "-hls_list_size", "5", "-hls_flags", "omit_endlist",
                    str(root / "stale" / "index.m3u8")], check=True)
    return "stale/index.m3u8"

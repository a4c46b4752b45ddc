"""probe_camera on real sources: files of every fault kind, and a real RTSP server (gst-rtsp-server) refusing,
asking for a password, missing the path, frozen (SIGSTOP) and good."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import wave
from pathlib import Path

import pytest

from vcascade.core.config import CameraConfig
from vcascade.edge.capture.faults import FAULT_REASONS
from vcascade.edge.capture.probe import PROBE_OK, CameraProbe, probe_camera


def probe(url: str | Path, timeout_s: float = 3.0) -> CameraProbe:
    return probe_camera(CameraConfig(url=str(url), edge="e"), timeout_s)


def test_good_file_opens_and_names_its_codec_and_size(short_video):
    result = probe(short_video)
    assert result.ok and result.reason == PROBE_OK
    assert "h264 160x120" in result.detail and "first frame at 0 ms" in result.detail


@pytest.mark.parametrize(
    ("make", "reason", "words"),
    [
        ("missing", "missing_file", "no such file"),
        ("directory", "not_a_file", "is a directory"),
        ("fifo", "not_a_file", "is a FIFO"),
        ("empty", "empty_file", "file is empty"),
        ("garbage", "invalid_data", "Invalid data found"),
        ("unfinished_mp4", "truncated_file", "without its index (moov)"),
        ("audio_only", "no_video_stream", "no video stream (streams: audio)"),
        ("unknown_codec", "unsupported_codec", "no decoder for its video codec"),
    ],
)
def test_file_faults_have_their_own_reason(tmp_path, short_video, make, reason, words):
    path = tmp_path / "cam.mp4"
    if make == "directory":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)  # FFmpeg would block on it forever: found before FFmpeg opens it
    elif make == "empty":
        path.write_bytes(b"")
    elif make == "garbage":
        path.write_bytes(b"this is not a video" * 1000)
    elif make == "unfinished_mp4":  # moov at the end of the file, cut off: a recording never finished
        data = short_video.read_bytes()
        assert data[4:8] == b"ftyp" and data.find(b"moov") > len(data) // 2
        path.write_bytes(data[: len(data) // 2])
    elif make == "audio_only":
        path = tmp_path / "tone.wav"
        _write_tone(path)
    elif make == "unknown_codec":  # a Matroska video track whose codec id no decoder knows
        path = tmp_path / "cam.mkv"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(short_video), "-c", "copy", str(path)], check=True)
        data = path.read_bytes()
        assert b"V_MPEG4/ISO/AVC" in data
        path.write_bytes(data.replace(b"V_MPEG4/ISO/AVC", b"V_UNKNOWN/X/ABC", 1))
    result = probe(path)
    assert reason in FAULT_REASONS
    assert (result.ok, result.reason) == (False, reason) and words in result.detail, result


def _write_tone(path: Path) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(8000)
        out.writeframes(b"\0\1" * 8000)


def _probe_as_nobody(url: str, conn) -> None:
    os.setgid(65534)
    os.setuid(65534)
    conn.send(probe(url))


def test_unreadable_file_is_permission_denied(tmp_path, short_video):
    path = tmp_path / "secret.mp4"
    path.write_bytes(short_video.read_bytes())
    path.chmod(0)
    if os.geteuid() != 0:
        result = probe(path)
    else:  # root reads any file: probe from a forked child that dropped to the nobody user
        parent, child = multiprocessing.get_context("fork").Pipe()
        proc = multiprocessing.get_context("fork").Process(target=_probe_as_nobody, args=(str(path), child))
        proc.start()
        assert parent.poll(30), "the unprivileged probe did not answer"
        result = parent.recv()
        proc.join(10)
    assert (result.ok, result.reason) == (False, "permission_denied") and "permission denied" in result.detail


def test_refused_connection_and_unknown_host(free_port):
    port = free_port()
    result = probe(f"rtsp://admin:pw@127.0.0.1:{port}/cam")
    assert (result.ok, result.reason) == (False, "connection_refused")
    assert "pw" not in result.detail and "***@" in result.detail  # credentials redacted
    result = probe("rtsp://camera.invalid/stream")  # RFC 6761: .invalid never resolves
    assert (result.ok, result.reason) == (False, "name_not_resolved") and "camera.invalid" in result.detail
    assert probe(f"http://127.0.0.1:{port}/video.mjpg").reason == "connection_refused"


def test_check_deep_hides_a_password_with_at_slash_and_space_and_a_query_password(free_port):
    """Issue 28, item 4: the old pattern stopped at the first '@' and knew nothing of the query."""
    port = free_port()
    result = probe(f"rtsp://admin:p@ss w/rd9@127.0.0.1:{port}/cam?user=admin&pwd=Query9secret")
    assert not result.ok  # FFmpeg cuts the host at the '/': name_not_resolved
    for part in ("p@ss", "ss w", "w/rd9", "Query9secret"):
        assert part not in result.detail, result.detail
    assert "127.0.0.1" in result.detail


def test_rtsp_good_wrong_password_no_password_and_wrong_path(rtsp_auth_server):
    server = rtsp_auth_server
    good = probe(server.url, 10.0)
    assert good.ok and "s3cret" not in good.detail and "h264 160x120" in good.detail, good
    wrong = probe(server.url.replace("s3cret", "guess"), 10.0)
    assert (wrong.ok, wrong.reason) == (False, "unauthorized") and "401" in wrong.detail
    assert "guess" not in wrong.detail
    anonymous = probe(f"rtsp://127.0.0.1:{server.port}{server.path}", 10.0)
    assert anonymous.reason == "unauthorized"
    missing = probe(server.url.replace("/cam", "/nothing-here"), 10.0)
    assert (missing.ok, missing.reason) == (False, "not_found") and "404" in missing.detail


def test_frozen_rtsp_server_is_an_open_timeout_within_the_timeout(rtsp_server):
    rtsp_server.freeze()
    try:
        result = probe(rtsp_server.url, 1.5)
    finally:
        rtsp_server.thaw()
    assert (result.ok, result.reason) == (False, "open_timeout") and "no answer within" in result.detail
    assert probe(rtsp_server.url, 10.0).ok  # thawed: the same server answers again

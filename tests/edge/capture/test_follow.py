"""Growing files (issue 31, item 2): a recording still being written by a real FFmpeg process (MPEG-TS, fragmented
MP4, remuxed from the sample video at its own pace) is followed to its end, which comes when the writer has been
idle for ``follow_idle_s`` (reason ``writer_idle``) with every frame the finished file has (which, finished, ends
``end_of_file``); ``follow: never`` reads only what is there."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)
SECONDS = 4


def _writer(bikes_path: Path, out: Path, *muxer: str) -> subprocess.Popen:
    """FFmpeg remuxing the first SECONDS of bikes.mp4 into ``out`` at the video's own pace (``-re``), writing each
    packet (or fragment) as it comes, as a recorder does."""
    exe = shutil.which("ffmpeg") or pytest.fail("ffmpeg not found (apt-get install ffmpeg)")
    return subprocess.Popen([exe, "-v", "error", "-y", "-re", "-i", str(bikes_path), "-t", str(SECONDS), "-an", "-c",
                             "copy", "-flush_packets", "1", *muxer, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _started(path: Path, wait_for) -> None:
    assert wait_for(lambda: path.exists() and path.stat().st_size > 4096, 30), "the writer wrote nothing"


def _finished_frames(path: Path, read_all) -> int:
    """Frames of the finished file read as a file finished a minute ago (not followed): the oracle."""
    old_s = time.time() - 60
    os.utime(path, (old_s, old_s))
    reader, frames = read_all(path, timeout_s=60)
    assert (reader.state, reader.reason) == ("ended", "end_of_file"), reader.machine.history()
    return len(frames)


@pytest.mark.parametrize("name, muxer, idle_s", [
    ("grow.ts", ("-f", "mpegts"), 2.0),
    # a fragment per keyframe: bikes.mp4's keyframes are up to 3 s apart, so the file does not grow for up to 3 s
    ("grow.mp4", ("-f", "mp4", "-movflags", "frag_keyframe+empty_moov"), 3.5),
])
def test_a_file_being_written_is_followed_to_its_end(tmp_path, bikes_path, read_all, wait_for, name, muxer, idle_s):
    path = tmp_path / name
    writer = _writer(bikes_path, path, *muxer)
    try:
        _started(path, wait_for)
        # read_timeout_s below follow_idle_s: waiting for the writer is not a stall
        reader, frames = read_all(path, timeout_s=60, follow_idle_s=idle_s, read_timeout_s=1.0)
        done_s = time.time()
        assert writer.wait(timeout=30) == 0, writer.stderr.read()
    finally:
        writer.kill()
        writer.wait()
    assert (reader.state, reader.reason) == ("ended", "writer_idle"), reader.machine.history()
    assert f"no new data for {idle_s:g} s" in reader.machine.history()[-1].detail
    assert done_s - path.stat().st_mtime >= 0.75 * idle_s  # it ended only after the writer was idle for follow_idle_s
    stamps = [frame.stream_ts_ms for frame in frames]
    assert all(b > a for a, b in zip(stamps, stamps[1:], strict=False))
    assert reader.corrupt_frames == 0, reader.losses
    assert reader.frames == len(frames) == _finished_frames(path, read_all) >= 25 * SECONDS


def test_follow_never_reads_only_what_is_there(tmp_path, bikes_path, read_all, wait_for):
    path = tmp_path / "rec.ts"
    writer = _writer(bikes_path, path, "-f", "mpegts")
    try:
        _started(path, wait_for)
        early, early_frames = read_all(path, timeout_s=60, follow="never")
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
        writer.wait()
    assert early.reason == "end_of_file", early.machine.history()
    assert 0 < len(early_frames) < _finished_frames(path, read_all), len(early_frames)

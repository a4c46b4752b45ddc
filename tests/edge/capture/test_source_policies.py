"""Frame policies on real files: realtime pacing by PTS, looping, detect_fps by PTS, blocked is not stalled, a
waiting supervisor sleeps."""

from __future__ import annotations

import time

import numpy as np
import pytest

from vcascade.edge.capture.source import LOOK_INTERVAL_S


def _take(slots, camera: str, n: int, timeout_s: float = 30.0) -> list:
    """Up to ``n`` frames of ``camera``, until its reader closed and its slot is empty, or ``timeout_s``."""
    frames, deadline = [], time.monotonic() + timeout_s
    while len(frames) < n and time.monotonic() < deadline and not slots.finished():
        frame = slots.take(0.2)
        if frame is not None and frame.camera == camera:
            frames.append(frame)
    return frames


@pytest.mark.parametrize("detect_fps", [5.0, 10.0])
def test_detect_fps_thins_frames_by_pts(cameras, bikes_path, wait_for, detect_fps):
    reader = cameras("thin", url=str(bikes_path), max_frames=100, detect_fps=detect_fps)  # 25 fps, 4 s of stream
    frames = _take(cameras.slots, "thin", 100, timeout_s=30)
    assert wait_for(lambda: reader.state == "ended", 15)
    steps_ms = np.diff([f.stream_ts_ms for f in frames])
    assert len(frames) == round(100 * detect_fps / 25)
    period_ms, frame_ms = 1000.0 / detect_fps, 40.0
    assert abs(steps_ms.mean() - period_ms) < 2.0  # the target rate on average...
    assert (np.abs(steps_ms - period_ms) <= frame_ms + 0.5).all()  # ...each step within one source frame of it
    assert reader.rate_skipped == 100 - len(frames) and reader.frames == 100
    assert cameras.slots.skipped["thin"] == 0  # rate skips are counted apart from newest-slot skips


def test_realtime_file_is_paced_by_its_pts_and_keeps_only_the_newest_frame(cameras, bikes_path, wait_for):
    reader = cameras("paced", url=str(bikes_path), realtime=True, max_frames=25)
    assert reader.policy == "newest"
    assert wait_for(lambda: reader.state == "ended", 30)
    frame = cameras.slots.take(1.0)  # nobody took frames meanwhile: only the newest one is left
    assert frame is not None and frame.seq == 24 and cameras.slots.skipped["paced"] == 24
    first = reader.machine.history()[0].at_s  # connecting -> streaming
    # 25 frames at 25 fps: released over at least their 960 ms of stream time, not decoded in a burst
    assert frame.capture_s - first >= 0.9 * frame.stream_ts_ms / 1000.0


def test_looping_file_keeps_increasing_timestamps(cameras, short_video, wait_for):
    reader = cameras("loop", url=str(short_video), loop=True, max_frames=25)  # 10 frames, 100 ms apart
    frames = _take(cameras.slots, "loop", 25)
    assert wait_for(lambda: reader.state == "ended", 15) and reader.machine.reason == "max_frames"
    assert reader.loops == 2 and [f.seq for f in frames] == list(range(25))
    assert np.allclose(np.diff([f.stream_ts_ms for f in frames]), 100.0, atol=1.0)


def test_blocked_camera_is_not_restarted(cameras, bikes_path, wait_for):
    reader = cameras("busy", url=str(bikes_path), max_frames=12, read_timeout_s=0.3)
    assert reader.policy == "every_frame"
    assert wait_for(lambda: reader.blocked, 15)
    time.sleep(1.0)  # nobody takes frames for 3x the read timeout: blocked, not stalled
    assert reader.blocked and reader.state == "streaming" and reader.reconnects == 0
    assert reader.blocked_s > 0.5
    frames = _take(cameras.slots, "busy", 12)
    assert [f.seq for f in frames] == list(range(12))
    assert wait_for(lambda: reader.state == "ended", 15)
    assert [t.target for t in reader.machine.history()] == ["streaming", "ended"]


def test_a_waiting_camera_s_supervisor_sleeps_between_looks(cameras, bikes_path, wait_for):
    """The supervisor no longer looks at its session every 50 ms (40 looks in 2 s): with nothing happening it looks
    about every LOOK_INTERVAL_S (its stop event, the frame counters), and its session's open and end wake it."""
    reader = cameras("idle", url=str(bikes_path), max_frames=3)
    assert wait_for(lambda: reader.blocked and reader.state == "streaming", 15)
    looks: list[float] = []
    publish = reader.publish_totals  # called once per look (and at the end)
    reader.publish_totals = lambda: (looks.append(time.perf_counter()), publish())[1]
    time.sleep(2.0)
    assert 1 <= len(looks) <= 2.0 / LOOK_INTERVAL_S + 3, looks
    frames = _take(cameras.slots, "idle", 3)
    assert [f.seq for f in frames] == [0, 1, 2]
    assert wait_for(lambda: reader.state == "ended", 15) and reader.reason == "max_frames"
    assert [t.target for t in reader.machine.history()] == ["streaming", "ended"]

"""A frozen RTSP server is `stalled` at `read_timeout_s`; timestamps never go backwards or repeat across reconnects
and PTS restarts, a restart counted as a discontinuity, not a lost frame."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from prometheus_client import REGISTRY

FREEZE = {"open_timeout_s": 3.0, "read_timeout_s": 3.0, "backoff_initial_s": 0.2, "backoff_max_s": 1.0}


def _discontinuities(camera: str) -> float | None:
    return REGISTRY.get_sample_value("vcascade_edge_timestamp_discontinuities_total", {"edge": "edge", "camera": camera})


def _strictly_increasing(values: list[float]) -> bool:
    return all(b > a for a, b in zip(values, values[1:]))


def test_frozen_server_is_stalled_at_read_timeout_and_timestamps_continue_after_it(
    rtsp_server, cameras, consumer, wait_for
):
    live = cameras("live-frozen", url=rtsp_server.url, **FREEZE)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: live.state == "streaming" and live.frames > 10, 30), live.machine.history()
    rtsp_server.freeze()
    frozen_s = time.perf_counter()
    assert wait_for(lambda: live.state != "streaming", 30), live.machine.history()
    steps = [t for t in live.machine.history() if t.at_s >= frozen_s]
    assert (steps[0].target, steps[0].reason) == ("stalled", "read_timeout"), steps
    elapsed_s = steps[0].at_s - frozen_s
    assert elapsed_s < FREEZE["read_timeout_s"] * 1.6, elapsed_s  # loosely: twice the timeout was the bug
    frames_before = live.frames
    rtsp_server.kill()
    rtsp_server.start()
    assert wait_for(lambda: live.state == "streaming" and live.frames > frames_before + 10, 40), live.machine.history()
    taker.stop.set()
    stamps = [frame.stream_ts_ms for _, frame in taker.of("live-frozen")]
    assert stamps[0] >= 0 and _strictly_increasing(stamps), stamps
    assert live.timeline.discontinuities >= 1
    # published at the supervisor's next look at its session (edge/capture/source.py, LOOK_INTERVAL_S)
    assert wait_for(lambda: _discontinuities("live-frozen") == live.timeline.discontinuities, 5)
    assert live.losses.get("pts_not_increasing", 0) == 0, live.losses  # a reconnect loses no frame


@pytest.fixture(scope="module")
def restarted_ts(tmp_path_factory):
    """Two 2 s, 25 fps MPEG-TS clips back to back (``cat``): the PTS jump back 2 s at frame 50."""
    tmp = tmp_path_factory.mktemp("restart")
    part = tmp / "part.ts"
    subprocess.run([shutil.which("ffmpeg") or "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=160x120:rate=25", "-t", "2", "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0",
                    "-g", "10", "-pix_fmt", "yuv420p", "-threads", "1", str(part)], check=True)
    joined = tmp / "joined.ts"
    joined.write_bytes(part.read_bytes() * 2)
    return joined


def test_pts_restart_in_a_file_is_a_discontinuity_not_a_lost_frame(read_all, restarted_ts):
    reader, frames = read_all(restarted_ts)
    stamps = [frame.stream_ts_ms for frame in frames]
    assert len(frames) == 100 and reader.reason == "end_of_file"
    assert _strictly_increasing(stamps), stamps
    assert stamps[50] - stamps[49] == pytest.approx(40.0, abs=1.0)  # joined one frame interval on
    assert reader.corrupt_frames == 0, reader.losses
    assert reader.timeline.discontinuities == 1

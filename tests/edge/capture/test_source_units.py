"""The pure parts of camera ingestion: backoff, PTS rate gate, packet gap rule, state machine, source kinds."""

from __future__ import annotations

import logging
import random
import subprocess

import av
import numpy as np
import pytest
from av.video.reformatter import VideoReformatter
from prometheus_client import REGISTRY

from vcascade.core.config import CameraConfig
from vcascade.core.telemetry.logs import RateLimitFilter
from vcascade.edge.capture.av_reader import open_source, to_bgr
from vcascade.edge.capture.backoff import Backoff
from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.capture.state import CameraStateMachine
from vcascade.edge.capture.kinds import SourceError, device_index, is_live
from vcascade.edge.metrics import CameraTelemetry
from vcascade.edge.capture.timing import PacketGaps, RateGate


def test_backoff_is_full_jitter_under_a_doubling_capped_bound():
    backoff = Backoff(0.5, 4.0, random.Random(7))
    caps = []
    for _ in range(8):
        caps.append(backoff.cap_s())
        assert 0.0 <= backoff.next_delay_s() <= caps[-1]
    assert caps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    delays = [Backoff(1.0, 1.0, random.Random(i)).next_delay_s() for i in range(200)]
    assert min(delays) < 0.1 and max(delays) > 0.9  # spread over the whole range: full jitter
    backoff.reset()
    assert backoff.cap_s() == 0.5 and backoff.attempt == 0
    with pytest.raises(ValueError, match="positive"):
        Backoff(0.0, 1.0)


def test_rate_gate_follows_pts_not_frame_count():
    gate = RateGate(5.0)  # one frame per 200 ms of stream time
    vfr_pts = [0, 40, 80, 120, 160, 200, 240, 500, 520, 700, 1000, 1010]
    kept = [pts for pts in vfr_pts if gate.accept(pts)]
    assert kept == [0, 200, 500, 700, 1000]
    assert RateGate(5.0).accept(0) and [RateGate(50.0).accept(p) for p in (0,)] == [True]
    slow = RateGate(100.0)  # a stream slower than the target passes every frame
    assert all(slow.accept(p) for p in range(0, 1000, 40))
    restarted = RateGate(5.0)
    assert [restarted.accept(p) for p in (0, 100, 200, 0, 100)] == [True, False, True, True, False]
    with pytest.raises(ValueError):
        RateGate(0)


def test_packet_gaps_count_isolated_jumps_and_learn_a_new_frame_rate():
    gaps = PacketGaps()
    found = [gaps.observe(t) for t in (0, 40, 80, 120, 160, 400, 440, 480, 480, 520)]
    assert found[6] == 5 and sum(found) == 5  # 240 ms then back to 40: 5 frames missing, counted one packet late
    vfr = PacketGaps()  # vfr.mp4's shape: 40 ms frames, then 200 ms frames for good
    assert sum(vfr.observe(t) for t in [40 * i for i in range(50)] + [1960 + 200 * i for i in range(1, 51)]) == 0
    irregular = PacketGaps()  # variable rate throughout: only a step far above the median is long
    assert sum(irregular.observe(t) for t in (0, 100, 150, 250, 300, 400, 700, 800, 900)) == 0
    assert irregular.observe(3000) == 0 and irregular.observe(3100) > 0  # 2.1 s, then back to ~100 ms


def test_state_machine_sets_one_state_counts_reasons_and_logs_once(caplog):
    machine = CameraStateMachine(CameraTelemetry("edge-u", "cam-u"))
    value = lambda state, reason: REGISTRY.get_sample_value(
        "vcascade_edge_camera_state", {"edge": "edge-u", "camera": "cam-u", "state": state, "reason": reason})
    assert value("connecting", "start") == 1 and value("streaming", "") == 0
    with caplog.at_level(logging.INFO, logger="vcascade.edge.capture.state"):
        assert machine.to("streaming", "opened")
        assert not machine.to("streaming", "opened")  # no change: nothing logged or counted
        machine.to("stalled", "read_timeout", "no frame for 2.0 s")
    assert value("stalled", "read_timeout") == 1 and value("streaming", "opened") == 0
    assert value("connecting", "start") == 0 and value("streaming", "") is None  # one series per state
    assert [(t.source, t.target, t.reason) for t in machine.history()] == [
        ("connecting", "streaming", "opened"), ("streaming", "stalled", "read_timeout")]
    assert len(caplog.records) == 2 and "read_timeout" in caplog.records[1].getMessage()
    assert REGISTRY.get_sample_value("vcascade_edge_camera_transitions_total", {
        "edge": "edge-u", "camera": "cam-u", "state": "stalled", "reason": "read_timeout"}) == 1
    with pytest.raises(ValueError, match="unknown camera state"):
        machine.to("sleeping", "x")


def test_reader_totals_become_counter_increments_and_never_go_back():
    telemetry = CameraTelemetry("edge-t", "cam-t")
    value = lambda name: REGISTRY.get_sample_value(name, {"edge": "edge-t", "camera": "cam-t"})
    names = ("vcascade_edge_frames_decoded_total", "vcascade_edge_frames_rate_skipped_total",
             "vcascade_edge_camera_blocked_seconds_total", "vcascade_edge_frames_skipped_total")
    assert [value(n) for n in names] == [0, 0, 0, 0]  # bound from construction on
    telemetry.publish_reader_totals(10, 2, 0.5, 1)
    telemetry.publish_reader_totals(15, 2, 0.75, 3)
    assert [value(n) for n in names] == [15, 2, 0.75, 3]
    telemetry.publish_reader_totals(15, 2, 0.75, 0)  # a removed camera's slot reads 0: the counter stays
    telemetry.publish_reader_totals(16, 2, 0.75, 4)
    assert [value(n) for n in names] == [16, 2, 0.75, 4]


def test_bgr_conversion_with_one_context_per_stream_equals_pyav_and_follows_a_size_change(tmp_path):
    parts = []
    for size in ("320x240", "640x480"):  # a transport stream whose resolution changes half-way
        parts.append(tmp_path / f"{size}.ts")
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size={size}:rate=25", "-t", "0.4",
                        "-c:v", "libx264", "-g", "5", "-f", "mpegts", str(parts[-1])], check=True)
    joined = tmp_path / "joined.ts"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    reformatter, shapes = VideoReformatter(), []
    with av.open(str(joined)) as container:
        for frame in container.decode(video=0):
            image = to_bgr(reformatter, frame)
            assert image.dtype == np.uint8 and np.array_equal(image, frame.to_ndarray(format="bgr24"))
            shapes.append(image.shape)
    assert shapes == [(240, 320, 3)] * 10 + [(480, 640, 3)] * 10


@pytest.mark.parametrize(
    ("url", "live", "device"),
    [("rtsp://u:p@h/s", True, None), ("http://h/x.mjpg", True, None), ("https://h/live.m3u8", True, None),
     ("device://0", True, 0), ("device://12", True, 12), ("/videos/a.mp4", False, None), ("device://x", True, None)],
)
def test_source_kinds(url, live, device):
    assert is_live(url) is live and device_index(url) == device


def test_bad_device_url_and_missing_device_are_clear_errors():
    with pytest.raises(CameraFault, match="device://N") as info:
        open_source(CameraConfig(url="device://cam", edge="e"))
    assert info.value.reason == "bad_url" and isinstance(info.value, SourceError)
    with pytest.raises(CameraFault, match="no such device") as info:
        open_source(CameraConfig(url="device://99", edge="e"))
    assert info.value.reason == "missing_file"


def test_unreachable_http_stream_error_has_no_credentials(free_port):
    url = f"http://admin:hunter2@127.0.0.1:{free_port()}/video.mjpg"
    with pytest.raises(SourceError) as info:
        open_source(CameraConfig(url=url, edge="e", open_timeout_s=2.0))
    assert "hunter2" not in str(info.value) and "***@127.0.0.1" in str(info.value)


def test_state_change_lines_are_rate_limited_per_camera_not_per_template():
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    handler.addFilter(RateLimitFilter(60.0))
    logger = logging.getLogger("vcascade.edge.capture.state")
    logger.addHandler(handler)
    try:
        first = CameraStateMachine(CameraTelemetry("edge-r", "cam-a"))
        second = CameraStateMachine(CameraTelemetry("edge-r", "cam-b"))
        for _ in range(3):  # a reconnect loop: the same failure again and again
            for machine in (first, second):
                machine.to("backing_off", "connection_refused", "Connection refused")
                machine.to("connecting", "retry")
    finally:
        logger.removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # each camera's failure once; its repeats suppressed
    assert "camera cam-a:" in warnings[0] and "camera cam-b:" in warnings[1]
    assert all("(connection_refused)" in line for line in warnings)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        first.to("streaming", "opened")  # the recovery after a fault is a warning too
        first.to("ended", "stopped")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    levels = [(r.levelno, r.getMessage().split(": ", 1)[1]) for r in records[-2:]]
    assert levels == [(logging.WARNING, "connecting -> streaming (opened)"), (logging.INFO, "streaming -> ended (stopped)")]

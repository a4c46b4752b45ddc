"""A real RTSP server that dies, freezes and comes back: cameras stall, back off and resume on their own,
while another camera keeps streaming; frame age stays bounded under a slow consumer."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

FAST = {"open_timeout_s": 2.0, "read_timeout_s": 1.5, "backoff_initial_s": 0.2, "backoff_max_s": 1.0}
"""Short timeouts so faults show within seconds (defaults are 10 s)."""


def _states_since(reader, since_s: float) -> list[tuple[str, str]]:
    return [(t.target, t.reason) for t in reader.machine.history() if t.at_s >= since_s]


def _metric(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, {"edge": "edge", **labels})


def _state(camera: str, state: str) -> float:
    """``vcascade_edge_camera_state`` of one camera and state, whatever its ``reason`` label."""
    return sum(sample.value for family in REGISTRY.collect() if family.name == "vcascade_edge_camera_state"
               for sample in family.samples
               if sample.labels["edge"] == "edge" and sample.labels["camera"] == camera and sample.labels["state"] == state)


def _streaming_with_new_frames(reader, after: int) -> bool:
    return reader.state == "streaming" and reader.frames > after + 5


def test_killed_server_camera_reconnects_on_its_own_while_other_camera_streams(
    rtsp_server, cameras, consumer, wait_for, long_video
):
    live = cameras("live-kill", url=rtsp_server.url, **FAST)
    other = cameras("file-kill", url=str(long_video), realtime=True, loop=True)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: _streaming_with_new_frames(live, 0), 30), live.machine.history()
    killed_s = time.perf_counter()
    rtsp_server.kill()
    assert wait_for(lambda: live.state in ("stalled", "backing_off", "connecting"), 15), live.state
    other_frames = len(taker.of("file-kill"))
    time.sleep(1.0)  # the server stays down: reconnect attempts fail and back off
    assert len(taker.of("file-kill")) > other_frames and other.state == "streaming"
    frames_before = live.frames
    rtsp_server.start()
    assert wait_for(lambda: _streaming_with_new_frames(live, frames_before), 30), live.machine.history()
    steps = _states_since(live, killed_s)
    assert steps[0] in (("stalled", "stream_ended"), ("stalled", "read_timeout")), steps
    assert ("backing_off", "reconnect") in steps and ("connecting", "retry") in steps
    assert steps[-1] == ("streaming", "opened")
    assert live.reconnects >= 1 and live.error is None
    assert _metric("vcascade_edge_camera_reconnects_total", camera="live-kill") == live.reconnects
    assert _state("live-kill", "streaming") == 1 and _state("live-kill", "stalled") == 0
    assert other.state == "streaming" and other.reconnects == 0
    taker.stop.set()


@pytest.mark.parametrize("recovery", ["thaw", "restart"])
def test_frozen_server_is_detected_as_stalled_and_recovers(rtsp_server, cameras, consumer, wait_for, recovery):
    live = cameras(f"live-freeze-{recovery}", url=rtsp_server.url, **FAST)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: _streaming_with_new_frames(live, 0), 30), live.machine.history()
    frozen_s = time.perf_counter()
    rtsp_server.freeze()
    assert wait_for(lambda: live.state != "streaming", 20), live.machine.history()
    assert _states_since(live, frozen_s)[0] == ("stalled", "read_timeout")
    frames_before = live.frames
    if recovery == "thaw":
        rtsp_server.thaw()
    else:
        rtsp_server.kill()
        rtsp_server.start()
    assert wait_for(lambda: _streaming_with_new_frames(live, frames_before), 40), live.machine.history()
    assert live.reconnects >= 1
    taker.stop.set()


def test_frame_age_stays_bounded_when_the_consumer_is_slower_than_the_stream(rtsp_server, cameras, consumer, wait_for):
    live = cameras("live-slow", url=rtsp_server.url, **FAST)
    taker = consumer(cameras.slots, delay_s=0.2)  # 5 frames/s taken from a 25 frames/s stream
    assert wait_for(lambda: len(taker.of("live-slow")) >= 20, 40)
    taker.stop.set()
    taken = taker.of("live-slow")[2:]  # after the first frames (stream start-up)
    ages_s = [taken_s - frame.capture_s for taken_s, frame in taken]
    first_taken_s, first = taken[0]
    lags_s = [(t - first_taken_s) - (f.stream_ts_ms - first.stream_ts_ms) / 1000.0 for t, f in taken]
    assert max(ages_s) < 1.0, ages_s  # newest-frame slot: never a queue of old frames
    assert max(lags_s) - min(lags_s) < 1.0, lags_s  # behind the stream by a constant, not a growing, amount
    assert cameras.slots.skipped["live-slow"] > len(taken)
    assert live.state == "streaming" and live.reconnects == 0

"""Camera readers against real RTSP servers (gst-rtsp-server): a refused port, a wrong password, a wrong path and a
frozen server (SIGSTOP) each get their own reason, logged once per camera at WARNING; the good camera beside them
keeps streaming."""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY

FAST = {"open_timeout_s": 1.5, "read_timeout_s": 1.5, "backoff_initial_s": 0.2, "backoff_max_s": 0.5}


def _reasons(reader) -> set[str]:
    return {t.reason for t in reader.machine.history()}


def test_each_bad_camera_has_its_reason_and_the_good_one_is_never_affected(
    rtsp_auth_server, rtsp_server, cameras, consumer, wait_for, free_port, caplog
):
    auth = rtsp_auth_server
    with caplog.at_level(logging.INFO, logger="vcascade.edge.capture.state"):
        good = cameras("good", url=auth.url, **FAST)
        assert wait_for(lambda: good.state == "streaming", 30), good.machine.history()
        taker = consumer(cameras.slots)
        rtsp_server.freeze()  # a second server, frozen: accepts the TCP connection, never answers
        bad = {
            "refused": cameras("refused", url=f"rtsp://admin:pw@127.0.0.1:{free_port()}/cam", **FAST),
            "password": cameras("password", url=auth.url.replace("s3cret", "guess"), **FAST),
            "path": cameras("path", url=auth.url.replace("/cam", "/other"), **FAST),
            "frozen": cameras("frozen", url=rtsp_server.url, **FAST),
        }
        expected = {"refused": "connection_refused", "password": "unauthorized", "path": "not_found",
                    "frozen": "open_timeout"}
        assert wait_for(lambda: all(r.reconnects >= 2 for r in bad.values()), 60), {
            n: r.machine.history() for n, r in bad.items()}
        frames_before = len(taker.of("good"))
        assert wait_for(lambda: len(taker.of("good")) > frames_before + 25, 30)
    rtsp_server.thaw()
    for name, reader in bad.items():
        assert expected[name] in _reasons(reader), (name, reader.machine.history())
        assert reader.state in ("backing_off", "connecting") and reader.error is None  # live: keeps retrying
        assert reader.fault == expected[name]
        assert reader.detail and "s3cret" not in reader.detail and "pw@" not in reader.detail
        assert REGISTRY.get_sample_value("vcascade_edge_camera_transitions_total", {
            "edge": "edge", "camera": name, "state": "backing_off", "reason": expected[name]}) >= 2
    assert good.state == "streaming" and good.reconnects == 0 and "open_timeout" not in _reasons(good)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name, reason in expected.items():  # one line per camera and cause (repeats are rate-limited per camera)
        assert any(f"camera {name}: " in m and f"({reason})" in m for m in warnings), (name, warnings)
    assert not any("camera good:" in m for m in warnings)


def test_frozen_stream_is_ended_by_ffmpegs_own_read_timeout_not_abandoned(rtsp_server, cameras, consumer, wait_for):
    reader = cameras("freeze", url=rtsp_server.url, **FAST)
    consumer(cameras.slots)
    assert wait_for(lambda: reader.state == "streaming" and reader.frames > 5, 30), reader.machine.history()
    session = reader.session
    rtsp_server.freeze()
    try:
        assert wait_for(lambda: reader.state != "streaming", 15), reader.machine.history()
    finally:
        rtsp_server.thaw()
    stalled = [t for t in reader.machine.history() if t.target == "stalled"]
    assert stalled and stalled[0].reason == "read_timeout" and "FFmpeg read timeout" in stalled[0].detail
    assert session.outcome is not None  # the session ended itself (an abandoned one never sets its outcome)
    assert wait_for(lambda: not session.is_alive(), 2.0)  # and no thread is left behind in FFmpeg
    assert wait_for(lambda: reader.state == "streaming" and reader.session is not session, 30)

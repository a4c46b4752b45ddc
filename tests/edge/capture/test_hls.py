"""HLS cameras (issue 31, item 1): a playlist with an end is played once, paced, and ends (or loops with
``loop: true``); a live playlist written by a real FFmpeg HLS muxer is read paced by its timestamps (the
newest-frame slot drops nothing for a detector that keeps up); a playlist whose writer dies is ``stalled``
(``playlist_stale``) and never replayed as new, and reading resumes at the segments its writer adds again; a
stale playlist fails the pre-flight probe. Real processes: Python's http.server and ffmpeg."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

import pytest

from tests.hls import HttpServer, LiveWriter, hls_source, stale_playlist, vod_playlist
from vcascade.core.config import CameraConfig
from vcascade.edge.capture.probe import probe_camera
from vcascade.edge.capture.url_policy import allow_hosts

pytestmark = pytest.mark.timeout(240)
FAST_RETRY = {"backoff_initial_s": 0.3, "backoff_max_s": 1.0, "open_timeout_s": 5.0, "read_timeout_s": 5.0}


@pytest.fixture(scope="module")
def source_ts(tmp_path_factory, bikes_path) -> Path:
    """bikes.mp4 as MPEG-TS cut for 1 s segments (:func:`tests.hls.hls_source`)."""
    return hls_source(bikes_path, tmp_path_factory.mktemp("hls-src") / "bikes.ts")


@pytest.fixture
def http_root(tmp_path, free_port):
    server = HttpServer(tmp_path, free_port())
    yield server
    server.stop()


@pytest.fixture
def writers():
    started: list[LiveWriter] = []

    def start(source: Path, playlist: Path, append: bool = False) -> LiveWriter:
        writer = LiveWriter(source, playlist, append)
        started.append(writer)
        return writer

    yield start
    for writer in started:
        writer.stop(signal.SIGKILL)


def _books(reader, taker, slots) -> tuple[int, int]:
    """(frames decoded, frames taken + dropped by the newest-frame slot + still in it)."""
    held = 1 if slots.take(0.0) is not None else 0
    return reader.frames, len(taker.of(reader.camera)) + slots.skipped.get(reader.camera, 0) + held


def test_a_vod_playlist_is_played_once_paced_and_ends_with_its_reason(
    source_ts, http_root, cameras, consumer, wait_for
):
    url = http_root.url(vod_playlist(source_ts, http_root.root))
    started_s = time.perf_counter()
    vod = cameras("vod", url=url, **FAST_RETRY)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: vod.state == "ended", 60), vod.machine.history()
    took_s = time.perf_counter() - started_s
    assert (vod.reason, vod.frames, vod.reconnects, vod.loops) == ("end_of_playlist", 75, 0, 0), vod.machine.history()
    assert took_s >= 2.5, took_s  # 75 frames at 25 fps are paced over 3 s, not handed out in bursts
    assert wait_for(lambda: len(taker.of("vod")) + cameras.slots.skipped.get("vod", 0) >= 75, 10)
    decoded, accounted = _books(vod, taker, cameras.slots)
    assert decoded == accounted == 75
    assert cameras.slots.skipped.get("vod", 0) <= 3  # paced: a detector that keeps up gets every frame
    stamps = [frame.stream_ts_ms for _, frame in taker.of("vod")]
    assert all(b > a for a, b in itertools.pairwise(stamps))


def test_a_vod_playlist_loops_paced_only_with_loop(source_ts, http_root, cameras, consumer, wait_for):
    url = http_root.url(vod_playlist(source_ts, http_root.root, seconds=2))
    looped = cameras("looped", url=url, loop=True, **FAST_RETRY)
    taker = consumer(cameras.slots)
    started_s = time.perf_counter()
    assert wait_for(lambda: looped.loops >= 2, 60), looped.machine.history()
    elapsed_s = time.perf_counter() - started_s
    assert looped.state == "streaming" and looped.reconnects == 0
    assert looped.frames <= 25 * elapsed_s + 30, (looped.frames, elapsed_s)  # paced at 25 fps, not replayed unpaced
    # the taker catches up with the two passes' frames (a frame a loaded taker missed is a counted skip)
    assert wait_for(lambda: len(taker.of("looped")) + cameras.slots.skipped.get("looped", 0) >= 100, 15), \
        (len(taker.of("looped")), cameras.slots.skipped)
    stamps = [frame.stream_ts_ms for _, frame in taker.of("looped")]
    assert all(b > a for a, b in itertools.pairwise(stamps))


def test_a_live_playlist_is_paced_and_ends_when_its_writer_finishes_it(
    source_ts, http_root, cameras, consumer, wait_for, writers
):
    (http_root.root / "live").mkdir()
    writer = writers(source_ts, http_root.root / "live" / "index.m3u8")
    assert wait_for(lambda: writer.segments() >= 3, 30)
    live = cameras("live", url=http_root.url("live/index.m3u8"), **FAST_RETRY)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: live.frames >= 150, 40), live.machine.history()
    writer.stop(signal.SIGTERM)  # the muxer finishes the playlist: #EXT-X-ENDLIST
    assert "#EXT-X-ENDLIST" in writer.playlist.read_text()
    assert wait_for(lambda: live.state == "ended", 30), live.machine.history()
    assert live.reason == "end_of_playlist" and live.reconnects == 0, live.machine.history()
    decoded, accounted = _books(live, taker, cameras.slots)
    assert decoded == accounted
    # paced by its timestamps: the slot keeps nearly every frame for a consumer that keeps up (not ~88 % dropped)
    assert cameras.slots.skipped.get("live", 0) <= 0.05 * decoded, (cameras.slots.skipped, decoded)


def test_a_playlist_whose_writer_dies_is_stalled_never_replayed_and_resumes_with_new_segments(
    source_ts, http_root, cameras, consumer, wait_for, writers
):
    (http_root.root / "live").mkdir()
    playlist = http_root.root / "live" / "index.m3u8"
    writer = writers(source_ts, playlist)
    assert wait_for(lambda: writer.segments() >= 3, 30)
    live = cameras("dying", url=http_root.url("live/index.m3u8"), **FAST_RETRY)
    taker = consumer(cameras.slots)
    assert wait_for(lambda: live.frames >= 100, 40), live.machine.history()
    writer.stop(signal.SIGKILL)  # a crash: the playlist stays as it was, without an end
    killed_s = time.perf_counter()
    assert wait_for(lambda: live.reason == "playlist_stale", 30), live.machine.history()
    stalled = next(t for t in live.machine.history() if t.reason == "playlist_stale")
    assert stalled.target == "stalled"
    assert stalled.at_s - killed_s < 3 * 1 + 3 + 6, stalled  # its buffered segments, then 3 target durations
    frames_at_stall = live.frames
    time.sleep(4)  # reconnect attempts meanwhile find nothing new: no frame is replayed
    assert live.frames == frames_at_stall and live.state in ("backing_off", "connecting"), live.machine.history()
    assert live.fault == "playlist_stale"
    writers(source_ts, playlist, append=True)  # the writer comes back and adds segments after the old ones
    assert wait_for(lambda: live.state == "streaming" and live.frames > frames_at_stall + 50, 40), \
        live.machine.history()
    stamps = [frame.stream_ts_ms for _, frame in taker.of("dying")]
    assert all(b > a for a, b in itertools.pairwise(stamps))
    assert live.timeline.discontinuities >= 1


def test_the_probe_fails_a_stale_playlist_and_passes_a_growing_one(source_ts, http_root, wait_for, writers):
    (http_root.root / "live").mkdir()
    playlist = http_root.root / "live" / "index.m3u8"
    writer = writers(source_ts, playlist)
    assert wait_for(lambda: writer.segments() >= 3, 30)
    cfg = CameraConfig(url=http_root.url("live/index.m3u8"), edge="e")
    growing = probe_camera(cfg, 5.0)
    assert growing.ok, growing
    writer.stop(signal.SIGKILL)
    stale = probe_camera(cfg, 5.0)
    assert (stale.ok, stale.reason) == (False, "playlist_stale"), stale
    assert "did not grow" in stale.detail


def test_a_playlist_left_without_an_end_is_played_once_then_stalled(source_ts, http_root, cameras, consumer, wait_for):
    url = http_root.url(stale_playlist(source_ts, http_root.root, seconds=3))
    left = cameras("left", url=url, **FAST_RETRY)
    consumer(cameras.slots)
    assert wait_for(lambda: left.reason == "playlist_stale", 40), left.machine.history()
    frames_at_stall = left.frames
    assert 0 < frames_at_stall <= 75, frames_at_stall  # its 3 segments (at most), once
    time.sleep(4)  # several reconnect attempts: none replays a segment (the bug: the last ones every ~22 s)
    assert left.frames == frames_at_stall and left.reconnects >= 2, left.machine.history()
    assert {t.reason for t in left.machine.history()[-4:]} <= {"playlist_stale", "reconnect", "retry"}


def test_a_playlist_on_a_host_outside_camera_hosts_is_refused(source_ts, http_root, cameras, wait_for):
    url = http_root.url(vod_playlist(source_ts, http_root.root))
    allow_hosts(["10.20.0.0/16"])
    try:
        refused = cameras("refused", url=url, **FAST_RETRY)
        assert wait_for(lambda: refused.fault == "host_not_allowed", 30), refused.machine.history()
    finally:
        allow_hosts(None)
    assert refused.frames == 0 and refused.state in ("backing_off", "connecting")
    assert http_root.requests() == [], http_root.requests()  # refused before anything is fetched from it


def test_the_server_log_sees_requests(source_ts, http_root, read_all):
    """The check above can fail: the server's log holds every request."""
    reader, frames = read_all(http_root.url(vod_playlist(source_ts, http_root.root, seconds=1)), timeout_s=60)
    skipped = reader.slots.skipped.get("cam", 0)  # a VOD playlist is paced: a loaded taker may miss a frame, counted
    assert reader.reason == "end_of_playlist" and len(frames) + skipped == 25, (reader.machine.history(), len(frames))
    assert "GET /vod/index.m3u8 HTTP/1.1" in http_root.requests(), http_root.requests()

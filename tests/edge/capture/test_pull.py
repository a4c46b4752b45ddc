"""A file camera's frames pulled by the takers (edge/capture/pull.py, FrameSlots claims): decoded on the taker's
thread one frame ahead, one taker per camera at a time, every frame once and in order, and a session that ends
only once no pull runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vcascade.core.config import YoloxDetectorConfig
from vcascade.edge.capture.ffmpeg_log import CameraLog
from vcascade.edge.capture.frames import Frame, FrameSlots
from vcascade.edge.capture.pull import PulledFrames
from vcascade.edge.detection import build_detector
from vcascade.edge.detection.pool import DetectorPool


def _generated(camera: str, n: int, inside: list[int], threads: set[str], gate: threading.Event | None = None):
    """``n`` frames of ``camera``; records how many threads are inside at once and which threads advanced it."""
    for seq in range(n):
        inside[0] += 1
        inside[1] = max(inside[1], inside[0])
        threads.add(threading.current_thread().name)
        if gate is not None:
            gate.wait(30)
        inside[0] -= 1
        yield Frame(camera, seq, np.zeros((2, 2, 3), np.uint8), seq * 40.0, 0.0, 0.0)
    return "the end"


def test_a_file_camera_decodes_its_first_frame_then_one_frame_ahead_of_the_takes(cameras, bikes_path, wait_for):
    reader = cameras("file", url=str(bikes_path), max_frames=5)
    assert wait_for(lambda: reader.state == "streaming" and reader.frames == 1 and reader.blocked, 15)
    assert reader.frames == 1  # nobody took: only the first frame (a capture thread would have filled its slot)
    first = cameras.slots.take(10.0)
    assert first is not None and first.seq == 0
    assert reader.frames == 2  # the taken frame and the next, decoded on this thread
    rest = [cameras.slots.take(10.0) for _ in range(4)]
    assert [f.seq for f in rest if f is not None] == [1, 2, 3, 4]
    # the fifth frame was the last (max_frames): known when it was handed over, without another take
    assert wait_for(lambda: reader.state == "ended", 15) and reader.reason == "max_frames"
    assert reader.frames == 5 and reader.losses == {}


def test_two_takers_share_a_pulled_camera_one_at_a_time_and_get_every_frame_once():
    slots, inside, threads = FrameSlots(), [0, 0], set()
    slots.add_camera("cam", "every_frame", depth=4)
    with CameraLog("e", "cam") as ffmpeg_log:
        source = PulledFrames(_generated("cam", 300, inside, threads), ffmpeg_log)
        slots.attach("cam", source)
        taken: dict[str, list[int]] = {"a": [], "b": []}

        def take(name: str) -> None:
            while not source.done.is_set() or slots.queued("cam"):
                taken[name].extend(f.seq for f in slots.take_many(1, 0.2))

        takers = [threading.Thread(target=take, args=(name,), name=f"taker-{name}") for name in taken]
        for thread in takers:
            thread.start()
        for thread in takers:
            thread.join(30)
        assert not any(thread.is_alive() for thread in takers)
        slots.detach("cam")
    assert sorted(taken["a"] + taken["b"]) == list(range(300))  # every frame once
    assert taken["a"] == sorted(taken["a"]) and taken["b"] == sorted(taken["b"])
    assert inside[1] == 1  # never two threads decoding the camera at once
    assert threads <= {"taker-a", "taker-b"}  # decoded on the takers' threads only
    assert source.result == "the end" and source.error is None


def test_detach_waits_for_a_pull_in_progress(wait_for):
    slots, gate, threads = FrameSlots(), threading.Event(), set()
    slots.add_camera("cam", "every_frame", depth=4)
    with CameraLog("e", "cam") as ffmpeg_log:
        source = PulledFrames(_generated("cam", 3, [0, 0], threads, gate), ffmpeg_log)
        slots.attach("cam", source)
        got: list[Frame] = []
        taker = threading.Thread(target=lambda: got.extend(slots.take_many(1, 10.0)), name="taker")
        taker.start()
        detacher = threading.Thread(target=slots.detach, args=("cam",), name="detacher")
        try:
            assert wait_for(lambda: "taker" in threads, 10)  # the taker is inside the pull, held by the gate
            detacher.start()
            detacher.join(0.3)
            assert detacher.is_alive()  # the session may not close its source under a pull
        finally:
            gate.set()
        detacher.join(10)
        taker.join(10)
        assert not detacher.is_alive() and [f.seq for f in got] == [0]
        assert slots.take_many(1, 0.05) == []  # detached: nobody pulls it any more
        source.close()


def test_an_error_while_decoding_is_kept_for_the_session_and_the_frames_before_it_delivered():
    def broken():
        yield Frame("cam", 0, np.zeros((2, 2, 3), np.uint8), 0.0, 0.0, 0.0)
        raise RuntimeError("demuxer broke")

    slots = FrameSlots()
    slots.add_camera("cam", "every_frame", depth=4)
    with CameraLog("e", "cam") as ffmpeg_log:
        source = PulledFrames(broken(), ffmpeg_log)
        slots.attach("cam", source)
        assert [f.seq for f in slots.take_many(1, 5.0)] == [0]
        assert source.done.is_set() and isinstance(source.error, RuntimeError)
        assert slots.take_many(1, 0.05) == []
        slots.detach("cam")


@pytest.mark.parametrize("instances", [1, 2])
def test_the_pool_decodes_file_cameras_on_its_threads_in_order(cameras, bikes_path, yolox_path, instances):
    detector = build_detector(YoloxDetectorConfig(classes=None), yolox_path)
    readers = [cameras(name, url=str(bikes_path), max_frames=10) for name in ("a", "b")]
    pool = DetectorPool(cameras.slots, detector, instances, frames_per_run=2, name="pull")
    pool.start()
    seqs: dict[str, list[int]] = {"a": [], "b": []}
    try:
        while not cameras.slots.finished():
            detected = pool.next(timeout_s=30.0)
            assert detected is not None, "the pool stopped handing back frames"
            for item in detected:
                assert item.error == "" and item.detections is not None
                seqs[item.frame.camera].append(item.frame.seq)
            cameras.slots.release([item.frame for item in detected])
    finally:
        pool.stop()
    assert seqs == {"a": list(range(10)), "b": list(range(10))}
    assert all(r.state == "ended" and r.reason == "max_frames" and r.losses == {} for r in readers)


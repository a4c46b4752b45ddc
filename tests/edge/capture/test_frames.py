"""Frame slots: every-frame for files (nothing lost), newest-frame for live (skips counted), round-robin."""

import threading
import time

import numpy as np

from vcascade.edge.capture.frames import Frame, FrameSlots


def _frame(camera, seq):
    return Frame(camera, seq, np.zeros((2, 2, 3), np.uint8), seq * 40.0, 0.0, 0.0)


def test_every_frame_blocks_instead_of_dropping():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame", depth=2)
    produced = threading.Thread(target=lambda: [slots.put(_frame("a", i), stop) for i in range(10)])
    produced.start()
    seen = []
    while len(seen) < 10:
        frame = slots.take(timeout_s=2.0)
        assert frame is not None
        seen.append(frame.seq)
    produced.join()
    assert seen == list(range(10)) and slots.skipped["a"] == 0


def test_newest_keeps_one_frame_and_counts_skips():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("live", "newest")
    for i in range(5):
        assert slots.put(_frame("live", i), stop)
    assert slots.take(0.1).seq == 4
    assert slots.skipped["live"] == 4
    assert slots.take(0.05) is None


def test_round_robin_across_cameras():
    slots, stop = FrameSlots(), threading.Event()
    for cam in ("a", "b"):
        slots.add_camera(cam, "every_frame", depth=3)
    for i in range(3):
        slots.put(_frame("a", i), stop)
    slots.put(_frame("b", 0), stop)
    order = [slots.take(0.1).camera for _ in range(4)]
    assert order[:2] in (["a", "b"], ["b", "a"]) and order.count("b") == 1


def test_finished_after_close_and_drain():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame")
    slots.put(_frame("a", 0), stop)
    slots.close("a")
    assert not slots.finished()
    assert slots.take(0.1).seq == 0
    assert slots.finished() and slots.take(0.1) is None


def _wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def _reader_blocked_on_a_full_slot():
    """Camera ``a`` (depth 1) holds frame 0; a reader thread is putting frame 1 and waits for room. Returns
    (slots, stop, reader thread, list that receives the put's return value)."""
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame", depth=1)
    slots.put(_frame("a", 0), stop)
    result = []
    reader = threading.Thread(target=lambda: result.append(slots.put(_frame("a", 1), stop)))
    reader.start()
    _wait_for(lambda: "a" in slots._blocked)
    return slots, stop, reader, result


def test_blocked_put_returns_on_stop():
    _, stop, reader, result = _reader_blocked_on_a_full_slot()
    stop.set()
    reader.join(timeout=2.0)
    assert result == [False]


def test_every_waiting_detector_thread_is_woken_by_its_own_frame():
    """Two detector threads wait; two frames put wake both at once (none sleeps until its 30 s timeout)."""
    slots, stop = FrameSlots(), threading.Event()
    for cam in ("a", "b"):
        slots.add_camera(cam, "every_frame")
    taken: list[str] = []
    takers = [threading.Thread(target=lambda: taken.append(slots.take(timeout_s=30.0).camera)) for _ in range(2)]
    for taker in takers:
        taker.start()
    _wait_for(lambda: slots._takers_waiting == 2)
    slots.put(_frame("a", 0), stop)
    slots.put(_frame("b", 0), stop)
    for taker in takers:
        taker.join(timeout=5.0)
        assert not taker.is_alive()
    assert sorted(taken) == ["a", "b"]


def _waiting_taker(slots, timeout_s):
    """A detector thread taking one frame; returns (thread, list that receives what it took), once it waits."""
    taken = []
    taker = threading.Thread(target=lambda: taken.append(slots.take(timeout_s=timeout_s)))
    taker.start()
    _wait_for(lambda: slots._takers_waiting == 1)
    return taker, taken


def test_a_lone_file_frame_waits_for_the_next_one_before_it_wakes_the_detector():
    """every_frame: one queued frame leaves the waiting detector thread asleep; the second frame wakes it."""
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame", depth=4)
    taker, taken = _waiting_taker(slots, timeout_s=30.0)
    slots.put(_frame("a", 0), stop)
    taker.join(timeout=0.3)
    assert taker.is_alive() and slots._takers_waiting == 1, "one file frame woke the detector"
    slots.put(_frame("a", 1), stop)
    taker.join(timeout=5.0)
    assert not taker.is_alive() and taken[0].seq == 0
    assert slots.take(0.0).seq == 1


def test_a_lone_file_frame_is_taken_when_its_reader_closes_or_the_take_times_out():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame", depth=4)
    taker, taken = _waiting_taker(slots, timeout_s=30.0)
    slots.put(_frame("a", 0), stop)
    slots.close("a")  # the end of the file
    taker.join(timeout=5.0)
    assert not taker.is_alive() and taken[0].seq == 0

    slots.add_camera("b", "every_frame", depth=4)
    taker, taken = _waiting_taker(slots, timeout_s=2.0)  # long enough to be seen waiting on a loaded machine
    slots.put(_frame("b", 0), stop)
    taker.join(timeout=5.0)
    assert not taker.is_alive() and taken[0].seq == 0  # at the take's timeout, not None


def test_a_live_frame_or_a_full_file_slot_wakes_the_detector_at_once():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("live", "newest")
    slots.add_camera("file", "every_frame", depth=1)
    for camera in ("live", "file"):
        taker, taken = _waiting_taker(slots, timeout_s=30.0)
        slots.put(_frame(camera, 0), stop)
        taker.join(timeout=5.0)
        assert not taker.is_alive() and taken[0].camera == camera


def test_a_take_that_timed_out_leaves_the_next_put_and_take_working():
    slots, stop = FrameSlots(), threading.Event()
    slots.add_camera("a", "every_frame")
    assert slots.take(0.02) is None
    assert slots._takers_waiting == 0
    slots.put(_frame("a", 0), stop)
    assert slots.take(1.0).seq == 0


def test_close_wakes_a_waiting_detector_thread():
    slots = FrameSlots()
    slots.add_camera("a", "every_frame")
    result = []
    taker = threading.Thread(target=lambda: result.append(slots.take_many(1, timeout_s=30.0)))
    taker.start()
    _wait_for(lambda: slots._takers_waiting == 1)
    slots.close("a")
    taker.join(timeout=5.0)
    assert result == [[]] and slots.finished()


def test_blocked_put_returns_when_its_camera_is_removed():
    slots, _, reader, result = _reader_blocked_on_a_full_slot()
    assert slots.remove_camera("a") == 1
    reader.join(timeout=5.0)
    assert result == [False]


def test_a_take_lets_the_blocked_reader_of_that_camera_go_on():
    slots, _, reader, result = _reader_blocked_on_a_full_slot()
    assert slots.take(1.0).seq == 0
    reader.join(timeout=5.0)
    assert result == [True] and slots.take(1.0).seq == 1

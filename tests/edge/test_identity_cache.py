"""The track -> identity cache: filled from result records on one thread, read from another, bounded by live tracks."""

import threading

from vcascade.edge.identity_cache import IdentityCache


def ok(track_id, identity_id, ts_ms, camera="cam", roi_id="r"):
    return {
        "status": "ok", "camera": camera, "track_id": track_id, "identity_id": identity_id, "similarity": 0.9,
        "roi_id": roi_id, "stream_ts_ms": ts_ms,
    }


def test_results_of_live_tracks_are_cached():
    cache = IdentityCache("e")
    cache.retain("cam", {1, 2})
    cache.write(ok(1, 7, 100.0, roi_id="a"))
    cache.write(ok(3, 9, 100.0))  # not a live track: ignored
    cache.write({"status": "dropped", "camera": "cam", "track_id": 2})
    cache.write(ok(-1, 5, 100.0))  # untracked
    got = cache.get("cam", 1)
    assert got is not None and got.identity_id == 7 and got.roi_id == "a" and got.similarity == 0.9
    assert cache.get("cam", 2) is None and cache.get("cam", 3) is None and cache.get("other", 1) is None


def test_newer_crop_wins_whatever_the_arrival_order():
    cache = IdentityCache("e")
    cache.retain("cam", {1})
    cache.write(ok(1, 8, 200.0))
    cache.write(ok(1, 7, 100.0))  # an older crop's result arriving late
    assert cache.get("cam", 1).identity_id == 8
    cache.write(ok(1, 9, 300.0))
    assert cache.get("cam", 1).identity_id == 9


def test_expired_tracks_are_forgotten_per_camera():
    cache = IdentityCache("e")
    cache.retain("a", {1})
    cache.retain("b", {1})
    cache.write(ok(1, 7, 0.0, camera="a"))
    cache.write(ok(1, 8, 0.0, camera="b"))
    cache.retain("a", set())
    assert cache.get("a", 1) is None and cache.size("a") == 0
    assert cache.get("b", 1).identity_id == 8


def test_bad_records_are_ignored():
    cache = IdentityCache("e")
    cache.retain("cam", {1})
    cache.write({"status": "ok", "camera": "cam", "track_id": 1})  # no identity
    cache.write({"status": "ok", "camera": "cam", "track_id": "x", "identity_id": 1})
    cache.write({"status": "ok"})
    assert cache.size("cam") == 0


def test_writer_and_reader_threads():
    cache = IdentityCache("e")
    cache.retain("cam", set(range(100)))

    def writer():
        for i in range(2000):
            cache.write(ok(i % 100, i, float(i)))

    thread = threading.Thread(target=writer)
    thread.start()
    for i in range(2000):
        cache.retain("cam", set(range(100)))
        cache.get("cam", i % 100)
    thread.join()
    assert cache.size("cam") == 100
    assert cache.get("cam", 99).identity_id == 1999


def test_a_text_result_is_cached_with_its_text_and_repeated_on_tracked_lines():
    """Regression: a text head's result line has no identity fields; it was counted as a bad record and its
    track's ``tracked`` lines never showed what was read."""
    import numpy as np

    from vcascade.edge.account import tracked_record
    from vcascade.edge.frames import Frame

    cache = IdentityCache("e")
    cache.retain("cam", {4})
    cache.write({"status": "ok", "camera": "cam", "track_id": 4, "roi_id": "t", "stream_ts_ms": 40.0,
                 "text": "KA 123", "text_score": 0.93})
    got = cache.get("cam", 4)
    assert got is not None and got.identity_id == -1 and got.extra == {"text": "KA 123", "text_score": 0.93}
    frame = Frame("cam", 2, np.zeros((4, 4, 3), np.uint8), 80.0, 0.0, 0.0)
    line = tracked_record(frame, (0.0, 0.0, 2.0, 2.0), 2, 0.8, 4, got, "car")
    assert line["text"] == "KA 123" and line["identity_roi_id"] == "t" and line["status"] == "tracked"

"""The track -> identity cache: filled from answers on one thread, read from another, bounded by live tracks."""

import threading

import msgspec
import numpy as np
import pytest

from tests.edge.link.test_account import _pending
from tests.edge.sinks.test_lines import result_record, tracked_record
from vcascade.core.protocol.wire import ClassifierOutput, EmbeddingOutput, Result, Roi, TextOutput
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.identity_cache import IdentityCache


def answer(cache, track_id, identity_id, ts_ms, camera="cam", roi_id="r", output=None):
    roi = Roi(roi_id=roi_id, camera=camera, frame_seq=0, stream_ts_ms=ts_ms, capture_unix_ms=0.0,
              xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.5, track_id=track_id)
    cache.remember(roi, output or EmbeddingOutput(identity_id, 0.9, False))


def test_answers_for_live_tracks_are_cached():
    cache = IdentityCache("e")
    cache.retain("cam", {1, 2})
    answer(cache, 1, 7, 100.0, roi_id="a")
    answer(cache, 3, 9, 100.0)  # not a live track: ignored
    answer(cache, -1, 5, 100.0)  # untracked
    got = cache.get("cam", 1)
    assert got is not None and got.gallery_identity() == 7 and got.roi_id == "a" and got.output.similarity == 0.9
    assert cache.get("cam", 2) is None and cache.get("cam", 3) is None and cache.get("other", 1) is None


def test_newer_crop_wins_whatever_the_arrival_order():
    cache = IdentityCache("e")
    cache.retain("cam", {1})
    answer(cache, 1, 8, 200.0)
    answer(cache, 1, 7, 100.0)  # an older crop's answer arriving late
    assert cache.get("cam", 1).gallery_identity() == 8
    answer(cache, 1, 9, 300.0)
    assert cache.get("cam", 1).gallery_identity() == 9


def test_expired_tracks_are_forgotten_per_camera():
    cache = IdentityCache("e")
    cache.retain("a", {1})
    cache.retain("b", {1})
    answer(cache, 1, 7, 0.0, camera="a")
    answer(cache, 1, 8, 0.0, camera="b")
    cache.retain("a", set())
    assert cache.get("a", 1) is None and cache.size("a") == 0
    assert cache.get("b", 1).gallery_identity() == 8


def test_writer_and_reader_threads():
    cache = IdentityCache("e")
    cache.retain("cam", set(range(100)))

    def writer():
        for i in range(2000):
            answer(cache, i % 100, i, float(i))

    thread = threading.Thread(target=writer)
    thread.start()
    for i in range(2000):
        cache.retain("cam", set(range(100)))
        cache.get("cam", i % 100)
    thread.join()
    assert cache.size("cam") == 100
    assert cache.get("cam", 99).gallery_identity() == 1999


def test_a_text_answer_is_cached_with_its_text_and_repeated_on_tracked_lines():
    """Regression: a text head's answer has no identity; its track's ``tracked`` lines show what was read."""
    cache = IdentityCache("e")
    cache.retain("cam", {4})
    answer(cache, 4, 0, 40.0, roi_id="t", output=TextOutput("KA 123", 0.93))
    got = cache.get("cam", 4)
    assert got is not None and got.gallery_identity() is None and got.read_text() == "KA 123"
    assert got.short_label() == "KA 123"
    frame = Frame("cam", 2, np.zeros((4, 4, 3), np.uint8), 80.0, 0.0, 0.0)
    line = tracked_record(frame, (0.0, 0.0, 2.0, 2.0), 2, 0.8, 4, got, "car")
    assert line["text"] == "KA 123" and line["identity_roi_id"] == "t" and line["status"] == "tracked"
    assert line["identity_id"] == -1 and line["similarity"] == 0.0


def test_a_track_keeps_its_best_reading_not_its_last():
    cache = IdentityCache("e")
    cache.retain("cam", {4})
    answer(cache, 4, 0, 40.0, roi_id="a", output=TextOutput("KA 12", 0.71))
    answer(cache, 4, 1, 80.0, roi_id="b", output=TextOutput("KA 123", 0.95))
    answer(cache, 4, 2, 120.0, roi_id="c", output=TextOutput("K4 1Z", 0.62))  # a later, blurred look
    answer(cache, 4, 3, 160.0, roi_id="d", output=TextOutput("", 0.0))  # nothing read
    assert cache.get("cam", 4).read_text() == "KA 123" and cache.get("cam", 4).roi_id == "b"
    answer(cache, 4, 4, 200.0, roi_id="e", output=TextOutput("KA 123", 0.95))  # as sure: the newer one
    assert cache.get("cam", 4).roi_id == "e"
    answer(cache, 4, 5, 100.0, roi_id="f", output=TextOutput("KA 1234", 0.99))  # surer, older crop: still kept
    assert cache.get("cam", 4).read_text() == "KA 1234"


@pytest.mark.parametrize(("output", "identity"), [
    (EmbeddingOutput(5, 0.91, False), (5, 0.91)),
    (ClassifierOutput(("car", "bus"), (0.75, 0.25)), (-1, 0.0)),
    (TextOutput("KA 123", 0.93), (-1, 0.0)),
])
def test_tracked_lines_repeat_the_head_fields_of_their_tracks_result_line(output, identity):
    """Whatever the head: the result line's head fields come back on the track's ``tracked`` lines, with
    ``identity_id``/``similarity`` always there (-1/0.0 when the head gives no identity)."""
    pending = _pending()
    pending.roi = msgspec.structs.replace(pending.roi, track_id=4)
    record = result_record(pending, Result(roi_id=pending.roi_id, worker="w", output=output, hops=[]), 100.1)
    cache = IdentityCache("e")
    cache.retain("cam", {4})
    cache.remember(pending.roi, output)
    frame = Frame("cam", 9, np.zeros((4, 4, 3), np.uint8), 360.0, 0.0, 0.0)
    line = tracked_record(frame, (0.0, 0.0, 2.0, 2.0), 2, 0.8, 4, cache.get("cam", 4))
    head_keys = set(output.__struct_fields__)
    assert {key: line[key] for key in head_keys} == {key: record[key] for key in head_keys}
    assert (line["identity_id"], line["similarity"], line["identity_roi_id"]) == (*identity, pending.roi_id)


def test_a_new_roi_carries_its_tracks_identity_from_its_own_recognizer_only():
    """What an ROI sends as ``track_identity_id``: the gallery identity its recognizer gave the track; -1 for no
    answer yet, another recognizer's answer, a provisional id, an untracked ROI."""
    cache = IdentityCache("e")
    cache.retain("cam", {1, 2, 3})
    roi = lambda track, recognizer: Roi(roi_id=f"r{track}", camera="cam", frame_seq=0, stream_ts_ms=1.0,  # noqa: E731
                                        capture_unix_ms=0.0, xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1),
                                        class_id=0, score=0.5, track_id=track, recognizer=recognizer)
    cache.remember(roi(1, "people"), EmbeddingOutput(7, 0.9, False))
    cache.remember(roi(2, "people"), EmbeddingOutput(-3, 1.0, True, True))
    cache.remember(roi(3, "plates"), TextOutput("KA 12", 0.9))
    assert cache.gallery_identity("cam", 1, "people") == 7
    assert cache.gallery_identity("cam", 1, "faces") == -1
    assert cache.gallery_identity("cam", 2, "people") == -1
    assert cache.gallery_identity("cam", 3, "people") == -1
    assert cache.gallery_identity("cam", 4, "people") == -1
    assert cache.gallery_identity("cam", -1, "people") == -1

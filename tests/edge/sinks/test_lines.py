"""The output lines: the typed events of the way back, delivered through the real WayBack (identity cache, event
updates, output lines), give lines byte-identical to those the edge wrote before the way back was typed.

``golden_lines.jsonl`` was written by the dict-building formatters of the edge as they were before (result, drop,
``tracked``, event, event update and camera state lines of the demo's embedding and text heads, plus a classifier
head and a result without output), encoded by the sinks' own encoder (:func:`vcascade.edge.sinks.queue.json_line`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vcascade.core.protocol.wire import HEAD_OUTPUTS, ClassifierOutput, EmbeddingOutput, Result, Roi, TextOutput, TextRegion
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.analytics.events import EventUpdates
from vcascade.edge.capture.frames import Frame
from vcascade.edge.capture.state import Transition
from vcascade.edge.link.state import PendingRoi, close_account
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity
from vcascade.edge.sinks.queue import json_line
from vcascade.edge.sinks.lines import OutputLines, line
from vcascade.edge.way_back import Answered, Dropped, EventRaised, Tracked, WayBack

GOLDEN = Path(__file__).with_name("golden_lines.jsonl")
HOPS = [("batch_wait", 1.5), ("preprocess", 0.75), ("stage0", 3.25), ("head", 0.5),
        ("broker_queue", 2.0), ("transit_broker_worker", 0.4), ("broker_return", 0.3)]


def _pending(track_id: int, reason: str, recognizer: str, class_id: int, class_name: str | None, n: int) -> PendingRoi:
    roi = Roi(roi_id=f"edge-1-run-{n}", camera="cam-a", frame_seq=41, stream_ts_ms=1366.6666667,
              capture_unix_ms=1764745200123.4567, xyxy=(10.123, 20.456, 110.789, 220.0), crop_xyxy=(2, 12, 119, 228),
              class_id=class_id, score=0.876543, track_id=track_id, recognizer=recognizer, send_reason=reason)
    pending = PendingRoi(roi, 100.0, 100.01, 100.03, 100.035, send_reason=reason, class_name=class_name)
    pending.sent_s = 100.036
    return pending


def _answered(pending: PendingRoi, worker: str, output, received_s: float, hops=HOPS) -> Answered:
    result = Result(roi_id=pending.roi_id, worker=worker, output=output, hops=list(hops))
    return Answered(pending, result, close_account(pending, result, received_s))


def _tracked(identities: IdentityCache, xyxy, class_id: int, score: float, track_id: int, name: str) -> Tracked:
    box = tuple(float(v) for v in xyxy)
    return Tracked("cam-a", 42, 1400.0001, 1764745200156.789, box, class_id, name, score, track_id,
                   identities.get("cam-a", track_id))


def test_lines_are_byte_identical_to_the_lines_written_before_the_typed_way_back():
    written: list[dict] = []
    identities = IdentityCache("edge-1")
    identities.retain("cam-a", {12, 13})
    way_back = WayBack(OutputLines([type("Sink", (), {"write": lambda self, r: written.append(r)})()]), identities,
                       EventUpdates("edge-1", identities))
    p1, p2, p3 = _pending(12, "first", "people", 0, None, 1), _pending(13, "refresh", "plates", 2, "plate", 2), \
        _pending(-1, "", "", 5, "bus", 3)
    box = np.array([1.111, 2.222, 3.333, 4.444], np.float32)
    answers = [
        _answered(p1, "worker-1", EmbeddingOutput(7, 0.9123456, False, False, (3,), -1, None), 100.0712345),
        _answered(p2, "worker-2", TextOutput("KA 123", 0.934567), 100.08),
        _answered(p3, "worker-1", ClassifierOutput(("a", "b"), (0.612345, 0.2)), 100.09),
        _answered(p3, "worker-1", None, 100.09, hops=()),
    ]
    # the order the golden file was written in: results, drops, tracked lines, events (the update follows the answer
    # that completes it; here its event is delivered after the answers, so the update follows the event at once)
    lines_of = [line(a) for a in answers]
    lines_of += [line(Dropped(_pending(12, "better", "people", 0, None, 4), "timeout", "edge-1")),
                 line(Dropped(_pending(-1, "every_detection", "", 0, None, 5), "stale", "broker-1"))]
    lines_of.append(line(_tracked(identities, box, 0, 0.7654321, 12, "person")))
    for answer in answers:
        way_back.deliver(answer)
    assert [r["roi_id"] for r in written] == [a.roi.roi_id for a in answers]
    written.clear()
    lines_of.append(line(_tracked(identities, box, 0, 0.7654321, 12, "person")))
    lines_of.append(line(_tracked(identities, [5, 6, 7, 8], 2, 0.5, 13, "plate")))
    way_back.deliver(EventRaised("cam-a", AnalyticsEvent("line_cross", "door", 13, "car", 1366.6666667,
                                                         1764745200123.4567, direction="in"), None, "e" * 32))
    exit_event = AnalyticsEvent("zone_exit", "lobby", 13, "car", 1500.5, 1764745200200.25, dwell_s=3.25, track_lost=True)
    way_back.deliver(EventRaised("cam-a", exit_event, identities.get("cam-a", 13), "f" * 32))
    dwell = AnalyticsEvent("zone_dwell", "lobby", 12, "person", 1500.5, 1764745200200.25, dwell_s=10.0)
    way_back.deliver(EventRaised("cam-a", dwell, identities.get("cam-a", 12), "a" * 32))
    way_back.camera_state("cam-a", Transition(5.0, "connecting", "streaming", "connected", "rtsp://x", 1764745200000.1234))
    got = b"".join(json_line(record) + b"\n" for record in [*lines_of, *written])
    assert got.splitlines() == GOLDEN.read_bytes().splitlines()


def test_an_event_update_follows_the_answer_that_completes_it():
    """The event updates run before the output lines, but the update they return is written after the answer's
    own line (the order the sinks always had)."""
    written: list[dict] = []
    identities = IdentityCache("e")
    identities.retain("cam-a", {13})
    way_back = WayBack(OutputLines([type("Sink", (), {"write": lambda self, r: written.append(r)})()]), identities,
                       EventUpdates("e", identities))
    event = AnalyticsEvent("line_cross", "door", 13, "car", 1.0, 2.0, direction="in")
    way_back.deliver(EventRaised("cam-a", event, None, "e" * 32))
    way_back.deliver(_answered(_pending(13, "first", "plates", 2, "plate", 2), "w", TextOutput("KA 1", 0.9), 100.08))
    assert [(r["kind"], r.get("status")) for r in written] == [("event", None), ("result", "ok"), ("event_update", None)]
    assert written[2]["text"] == "KA 1" and written[2]["identity_id"] is None


def test_a_failing_consumer_does_not_stop_the_lines():
    written: list[dict] = []

    class Broken:
        def take(self, event):
            raise RuntimeError("a preview bug")

    way_back = WayBack(OutputLines([type("Sink", (), {"write": lambda self, r: written.append(r)})()]), preview=Broken())
    way_back.deliver(Dropped(_pending(-1, "", "", 0, None, 9), "stale", "b"))
    assert [r["status"] for r in written] == ["dropped"]


def test_an_unknown_event_has_no_line():
    with pytest.raises(TypeError, match="no output line for dict"):
        line({"kind": "result"})


# ---------------------------------------------------------------- the lines of each event, field by field


def _roi_pending():
    roi = Roi(
        roi_id="e-1", camera="cam", frame_seq=3, stream_ts_ms=120.0, capture_unix_ms=1.7e12,
        xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 34, 44), class_id=1, score=0.8,
    )
    return PendingRoi(
        roi, capture_s=100.000, detect_start_s=100.010, detect_end_s=100.030, encoded_s=100.032, sent_s=100.040,
    )


def result_record(pending: PendingRoi, result: Result, received_s: float) -> dict:
    return line(Answered(pending, result, close_account(pending, result, received_s)))


def drop_record(pending: PendingRoi, reason: str, where: str) -> dict:
    return line(Dropped(pending, reason, where))


def tracked_record(frame: Frame, xyxy, class_id: int, score: float, track_id: int, identity, class_name="car") -> dict:
    box = tuple(float(v) for v in xyxy)
    return line(Tracked(frame.camera, frame.seq, frame.stream_ts_ms, frame.capture_unix_ms, box, class_id, class_name,
                        score, track_id, identity))


def test_records_carry_detection_and_outcome():
    result = Result(roi_id="e-1", worker="w", output=EmbeddingOutput(7, 0.9, False), hops=[])
    ok = result_record(_roi_pending(), result, 100.1)
    assert ok["status"] == "ok" and ok["class_name"] == "bicycle" and ok["identity_id"] == 7
    dropped = drop_record(_roi_pending(), "timeout", "e")
    assert dropped["status"] == "dropped" and dropped["reason"] == "timeout" and "latency_ms" not in dropped


def test_every_line_carries_the_track_id():
    pending = _roi_pending()
    assert drop_record(pending, "stale", "b")["track_id"] == -1
    tracked = PendingRoi(
        Roi(roi_id="e-2", camera="cam", frame_seq=4, stream_ts_ms=160.0, capture_unix_ms=1.7e12,
            xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 34, 44), class_id=0, score=0.8, track_id=12),
        capture_s=1.0, detect_start_s=1.0, detect_end_s=1.0, encoded_s=1.0, send_reason="first",
    )
    result = Result(roi_id="e-2", worker="w", output=EmbeddingOutput(3, 0.95, False), hops=[])
    assert result_record(tracked, result, 1.1)["track_id"] == 12
    assert result_record(tracked, result, 1.1)["send_reason"] == "first" and drop_record(pending, "stale", "b")["send_reason"] is None
    assert drop_record(tracked, "stale", "b")["track_id"] == 12


def test_tracked_line_carries_cached_identity_or_nulls():
    frame = Frame("cam", 9, np.zeros((4, 4, 3), np.uint8), stream_ts_ms=360.0, capture_s=1.0, capture_unix_ms=1.7e12)
    line = tracked_record(frame, np.array([1, 2, 3, 4], np.float32), 2, 0.7, 12, TrackIdentity(EmbeddingOutput(3, 0.95, False), "e-2", 160.0))
    assert line["status"] == "tracked" and line["roi_id"] is None and line["track_id"] == 12
    assert line["identity_id"] == 3 and line["similarity"] == 0.95 and line["identity_roi_id"] == "e-2"
    assert line["class_name"] == "car" and line["frame_seq"] == 9 and line["bbox_xyxy"] == [1.0, 2.0, 3.0, 4.0]
    unknown = tracked_record(frame, [1, 2, 3, 4], 2, 0.7, -1, None)
    assert unknown["identity_id"] is None and unknown["similarity"] is None and unknown["track_id"] == -1
    ok = result_record(_roi_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1)
    shared = set(ok) & set(line)
    assert {"camera", "frame_seq", "stream_ts_ms", "bbox_xyxy", "class_id", "score", "track_id"} <= shared


@pytest.mark.parametrize(("output", "fields"), [
    (EmbeddingOutput(5, 0.912345, True), {"identity_id": 5, "similarity": 0.9123, "enrolled": True,
                                          "provisional": False, "merged_from": [], "runner_up_id": -1,
                                          "runner_up_similarity": None, "crop_identity_id": -1, "crop_similarity": None, "track_looks": 0, "identity_revised_from": -1}),
    (EmbeddingOutput(-2, 1.0, True, True, ()), {"identity_id": -2, "similarity": 1.0, "enrolled": True,
                                                "provisional": True, "merged_from": [], "runner_up_id": -1,
                                                "runner_up_similarity": None, "crop_identity_id": -1, "crop_similarity": None, "track_looks": 0, "identity_revised_from": -1}),
    (EmbeddingOutput(4, 0.9, False, False, (9, -2), 7, 0.851234, 4, 0.881234, 6, 3), {
        "identity_id": 4, "similarity": 0.9, "enrolled": False, "provisional": False, "merged_from": [9, -2],
        "runner_up_id": 7, "runner_up_similarity": 0.8512, "crop_identity_id": 4, "crop_similarity": 0.8812,
        "track_looks": 6, "identity_revised_from": 3}),
    (ClassifierOutput(("car", "bus"), (0.612345, 0.2)), {"labels": ["car", "bus"], "label_scores": [0.6123, 0.2]}),
    (TextOutput("KA 12", 0.971234), {"text": "KA 12", "text_score": 0.9712, "texts": []}),
    (TextOutput("KA 12", 0.971234, (TextRegion("KA 12", 0.971234, (3.0, 40.25, 61.5, 52.0), 0.81234),
                                    TextRegion("", 0.31, (0.0, 0.0, 9.0, 4.0), 0.6))),
     {"text": "KA 12", "text_score": 0.9712, "texts": [
         {"text": "KA 12", "text_score": 0.9712, "box": [3.0, 40.25, 61.5, 52.0], "detection_score": 0.8123},
         {"text": "", "text_score": 0.31, "box": [0.0, 0.0, 9.0, 4.0], "detection_score": 0.6}]}),
])
def test_a_result_line_carries_its_head_output_fields_flat_whatever_the_head(output, fields):
    line = result_record(_roi_pending(), Result(roi_id="e-1", worker="w", output=output, hops=[]), 100.1)
    without_output = result_record(_roi_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1)
    assert {key: value for key, value in line.items() if key not in without_output} == fields
    assert list(line) == [*without_output][:-1] + list(fields) + ["latency_ms"]  # before the latency account
    assert json.loads(json.dumps(line)) == line, "the line is JSON as it is (lists, not tuples)"


def test_no_head_output_field_shadows_a_key_of_the_lines_it_is_written_to():
    result_keys = set(result_record(_roi_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1))
    frame = Frame("cam", 9, np.zeros((4, 4, 3), np.uint8), stream_ts_ms=360.0, capture_s=1.0, capture_unix_ms=1.7e12)
    tracked_keys = set(tracked_record(frame, [1, 2, 3, 4], 2, 0.7, 12, None))
    for output in HEAD_OUTPUTS:
        fields = set(output.__struct_fields__)
        assert not fields & result_keys, (output, fields & result_keys)
        assert not fields & (tracked_keys - {"identity_id", "similarity"}), output

"""The latency account: ordered hops, all positive, summing exactly to end_to_end."""

import json

import numpy as np
import pytest

from vcascade.core.protocol.wire import HEAD_OUTPUTS, ClassifierOutput, EmbeddingOutput, Result, Roi, TextOutput
from vcascade.edge.link.account import PendingRoi, close_account, drop_record, result_record, tracked_record
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.identity_cache import TrackIdentity


def _pending():
    roi = Roi(
        roi_id="e-1", camera="cam", frame_seq=3, stream_ts_ms=120.0, capture_unix_ms=1.7e12,
        xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 34, 44), class_id=1, score=0.8,
    )
    return PendingRoi(
        roi, capture_s=100.000, detect_start_s=100.010, detect_end_s=100.030, encoded_s=100.032, sent_s=100.040,
    )


def test_account_sums_to_end_to_end():
    worker = [("batch_wait", 5.0), ("preprocess", 2.0), ("stage0", 20.0), ("stage1", 15.0), ("head", 1.0)]
    broker = [("broker_queue", 3.0), ("transit_broker_worker", 4.0), ("broker_return", 0.5)]
    result = Result(roi_id="e-1", worker="w", output=EmbeddingOutput(7, 0.9, False), hops=worker + broker)
    account = close_account(_pending(), result, received_s=100.100)  # 60 ms round trip
    assert list(account) == [
        "frame_wait", "detect", "crop_encode", "edge_queue", "transit_to_worker", "broker_queue",
        "batch_wait", "preprocess", "stage0", "stage1", "head", "transit_back", "end_to_end",
    ]
    assert account["frame_wait"] == pytest.approx(10.0) and account["detect"] == pytest.approx(20.0)
    # round trip 60 - remote holds 50.5 = 9.5 ms edge<->broker, + 4.0 broker<->worker + 0.5 forwarding = 14 ms
    assert account["transit_to_worker"] == pytest.approx(7.0) and account["transit_back"] == pytest.approx(7.0)
    parts = sum(ms for hop, ms in account.items() if hop != "end_to_end")
    assert parts == pytest.approx(account["end_to_end"], abs=0.01) and account["end_to_end"] == pytest.approx(100.0)


def test_records_carry_detection_and_outcome():
    result = Result(roi_id="e-1", worker="w", output=EmbeddingOutput(7, 0.9, False), hops=[])
    ok = result_record(_pending(), result, 100.1)
    assert ok["status"] == "ok" and ok["class_name"] == "bicycle" and ok["identity_id"] == 7
    dropped = drop_record(_pending(), "timeout", "e")
    assert dropped["status"] == "dropped" and dropped["reason"] == "timeout" and "latency_ms" not in dropped


def test_every_line_carries_the_track_id():
    pending = _pending()
    assert pending.base_record()["track_id"] == -1
    tracked = PendingRoi(
        Roi(roi_id="e-2", camera="cam", frame_seq=4, stream_ts_ms=160.0, capture_unix_ms=1.7e12,
            xyxy=(1.0, 2.0, 30.0, 40.0), crop_xyxy=(0, 0, 34, 44), class_id=0, score=0.8, track_id=12),
        capture_s=1.0, detect_start_s=1.0, detect_end_s=1.0, encoded_s=1.0, send_reason="first",
    )
    result = Result(roi_id="e-2", worker="w", output=EmbeddingOutput(3, 0.95, False), hops=[])
    assert result_record(tracked, result, 1.1)["track_id"] == 12
    assert result_record(tracked, result, 1.1)["send_reason"] == "first" and pending.base_record()["send_reason"] is None
    assert drop_record(tracked, "stale", "b")["track_id"] == 12


def test_tracked_line_carries_cached_identity_or_nulls():
    frame = Frame("cam", 9, np.zeros((4, 4, 3), np.uint8), stream_ts_ms=360.0, capture_s=1.0, capture_unix_ms=1.7e12)
    line = tracked_record(frame, np.array([1, 2, 3, 4], np.float32), 2, 0.7, 12, TrackIdentity(3, 0.95, "e-2", 160.0))
    assert line["status"] == "tracked" and line["roi_id"] is None and line["track_id"] == 12
    assert line["identity_id"] == 3 and line["similarity"] == 0.95 and line["identity_roi_id"] == "e-2"
    assert line["class_name"] == "car" and line["frame_seq"] == 9 and line["bbox_xyxy"] == [1.0, 2.0, 3.0, 4.0]
    unknown = tracked_record(frame, [1, 2, 3, 4], 2, 0.7, -1, None)
    assert unknown["identity_id"] is None and unknown["similarity"] is None and unknown["track_id"] == -1
    ok = result_record(_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1)
    shared = set(ok) & set(line)
    assert {"camera", "frame_seq", "stream_ts_ms", "bbox_xyxy", "class_id", "score", "track_id"} <= shared


@pytest.mark.parametrize(("output", "fields"), [
    (EmbeddingOutput(5, 0.912345, True), {"identity_id": 5, "similarity": 0.9123, "enrolled": True,
                                          "provisional": False, "merged_from": [], "runner_up_id": -1,
                                          "runner_up_similarity": None}),
    (EmbeddingOutput(-2, 1.0, True, True, ()), {"identity_id": -2, "similarity": 1.0, "enrolled": True,
                                                "provisional": True, "merged_from": [], "runner_up_id": -1,
                                                "runner_up_similarity": None}),
    (EmbeddingOutput(4, 0.9, False, False, (9, -2), 7, 0.851234), {
        "identity_id": 4, "similarity": 0.9, "enrolled": False, "provisional": False, "merged_from": [9, -2],
        "runner_up_id": 7, "runner_up_similarity": 0.8512}),
    (ClassifierOutput(("car", "bus"), (0.612345, 0.2)), {"labels": ["car", "bus"], "label_scores": [0.6123, 0.2]}),
    (TextOutput("KA 12", 0.971234), {"text": "KA 12", "text_score": 0.9712}),
])
def test_a_result_line_carries_its_head_output_fields_flat_whatever_the_head(output, fields):
    line = result_record(_pending(), Result(roi_id="e-1", worker="w", output=output, hops=[]), 100.1)
    without_output = result_record(_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1)
    assert {key: value for key, value in line.items() if key not in without_output} == fields
    assert list(line) == [*without_output][:-1] + list(fields) + ["latency_ms"]  # before the latency account
    assert json.loads(json.dumps(line)) == line, "the line is JSON as it is (lists, not tuples)"


def test_no_head_output_field_shadows_a_key_of_the_lines_it_is_written_to():
    result_keys = set(result_record(_pending(), Result(roi_id="e-1", worker="w", hops=[]), 100.1))
    frame = Frame("cam", 9, np.zeros((4, 4, 3), np.uint8), stream_ts_ms=360.0, capture_s=1.0, capture_unix_ms=1.7e12)
    tracked_keys = set(tracked_record(frame, [1, 2, 3, 4], 2, 0.7, 12, TrackIdentity(3, 0.95, "e-2", 160.0)))
    for output in HEAD_OUTPUTS:
        fields = set(output.__struct_fields__)
        assert not fields & result_keys, (output, fields & result_keys)
        assert not fields & (tracked_keys - {"identity_id", "similarity"}), output

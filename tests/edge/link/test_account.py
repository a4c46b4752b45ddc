"""The latency account: ordered hops, all positive, summing exactly to end_to_end."""

import pytest

from vcascade.core.protocol.wire import EmbeddingOutput, Result, Roi
from vcascade.edge.link.state import PendingRoi, close_account


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

"""The worker's latency account: hops are consecutive differences that sum to the hold time."""

from __future__ import annotations

import pytest

from vcascade.center.intake.microbatch import MicroBatch, RoiItem
from vcascade.core.protocol.wire import Roi


def _item(t_received_s: float, ttl_ms: float = 0.0) -> RoiItem:
    roi = Roi(roi_id="r", camera="c", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0, xyxy=(0.0, 0.0, 1.0, 1.0),
              crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.5, ttl_ms=ttl_ms)
    return RoiItem(roi, b"", 0, t_received_s)


def test_hops_are_named_in_order_and_sum_to_the_hold_time():
    batch = MicroBatch(0, [_item(1.000), _item(1.010)], None, t_closed_s=1.020, t_ready_s=1.025,
                       t_stage_done_s=[1.100, 1.180])
    hops = batch.hops(1, t_head_done_s=1.200)
    assert [name for name, _ in hops] == ["batch_wait", "preprocess", "stage0", "stage1", "head"]
    assert [ms for _, ms in hops] == pytest.approx([10.0, 5.0, 75.0, 80.0, 20.0])
    assert sum(ms for _, ms in hops) == pytest.approx((1.200 - 1.010) * 1000.0)
    assert batch.hops(0, 1.200)[0][1] == pytest.approx(20.0)  # batch_wait is per ROI


def test_is_stale_only_with_a_deadline_and_strictly_past_it():
    assert not _item(0.0).is_stale(1e9)
    assert not _item(0.0, ttl_ms=100).is_stale(0.1)
    assert _item(0.0, ttl_ms=100).is_stale(0.1001)

"""Micro-batcher: full or timeout, STOP handling."""

from __future__ import annotations

import queue
import time

from vcascade.center.intake.microbatch import STOP, MicroBatcher, RoiItem
from vcascade.core.protocol.wire import Roi


def _item(roi_id: str, t_received_s: float, ttl_ms: float = 0.0, payload: bytes = b"", broker: int = 0) -> RoiItem:
    roi = Roi(
        roi_id=roi_id, camera="cam", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
        xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=1, score=0.9, ttl_ms=ttl_ms,
    )
    return RoiItem(roi, payload, broker, t_received_s)


def _inbox(items) -> queue.Queue:
    q: queue.Queue = queue.Queue()
    for item in items:
        q.put(item)
    return q


def test_full_batch_closes_without_waiting_for_the_timeout():
    batcher = MicroBatcher(max_batch=3, max_wait_ms=60_000)
    now = time.perf_counter()
    inbox = _inbox([_item(str(i), now) for i in range(5)])
    started = time.perf_counter()
    items, stopped = batcher.collect(inbox, idle_timeout_s=1.0)
    assert [i.roi.roi_id for i in items] == ["0", "1", "2"] and not stopped
    assert time.perf_counter() - started < 30  # far below the 60 s timeout: it closed on "full"
    assert inbox.qsize() == 2


def test_backlog_past_its_deadline_is_taken_without_waiting_up_to_max_batch():
    batcher = MicroBatcher(max_batch=3, max_wait_ms=60_000)
    old = time.perf_counter() - 120.0  # received two minutes ago: the deadline has passed
    inbox = _inbox([_item(str(i), old) for i in range(4)])
    assert [i.roi.roi_id for i in batcher.collect(inbox, 1.0)[0]] == ["0", "1", "2"]
    started = time.perf_counter()
    assert [i.roi.roi_id for i in batcher.collect(inbox, 1.0)[0]] == ["3"]
    assert time.perf_counter() - started < 30


def test_partial_batch_closes_after_max_wait_ms_from_first_receive():
    batcher = MicroBatcher(max_batch=8, max_wait_ms=100)
    first = time.perf_counter()
    inbox = _inbox([_item("a", first), _item("b", first)])
    items, stopped = batcher.collect(inbox, idle_timeout_s=1.0)
    closed = time.perf_counter()
    assert [i.roi.roi_id for i in items] == ["a", "b"] and not stopped
    assert closed - first >= 0.1  # waited for more ROIs until the first one's deadline


def test_idle_inbox_returns_empty_batch():
    items, stopped = MicroBatcher(4, 10).collect(queue.Queue(), idle_timeout_s=0.01)
    assert items == [] and not stopped


def test_stop_closes_the_batch_and_keeps_items_before_it():
    now = time.perf_counter()
    inbox = _inbox([_item("a", now), STOP, _item("late", now)])
    items, stopped = MicroBatcher(8, 60_000).collect(inbox, idle_timeout_s=1.0)
    assert [i.roi.roi_id for i in items] == ["a"] and stopped
    assert MicroBatcher(8, 10).collect(_inbox([STOP]), 1.0) == ([], True)


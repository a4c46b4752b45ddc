"""The edge's analytics step: events become lines with the identity their track has, metrics move (counts per
line, direction and class; zone visits and occupancy; records emitted), and an event fired before its track's
first result gets one ``event_update`` after it, in order, down the way back (real identity cache, real WayBack,
real JSONL sink, real EdgeNode)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from prometheus_client import REGISTRY

from tests.demo import demo_data
from vcascade.core.config import AnalyticsConfig, Deployment, JsonlSinkConfig
from vcascade.core.detections import Detections
from vcascade.core.protocol.wire import EmbeddingOutput, Result, Roi, TextOutput
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.analytics.events import MAX_PENDING_TRACKS, EventUpdates
from vcascade.edge.capture.frames import Frame
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.node import EdgeNode
from vcascade.edge.process import load_detector
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.sinks.lines import OutputLines, line
from vcascade.edge.sinks.registry import JsonlSink
from vcascade.edge.way_back import Answered, EventRaised, WayBack

EDGE = "edge-an"
CFG = AnalyticsConfig(
    lines=[{"name": "stop", "points": [[0, 200], [640, 200]]}],
    zones=[{"name": "dock", "polygon": [[0, 250], [640, 250], [640, 400], [0, 400]], "dwell_s": 0.2}],
)
IMAGE = np.zeros((480, 640, 3), np.uint8)


def lines_of(records: list[dict]):
    """A publish function that keeps the line of each event raised."""
    return lambda event: records.append(line(event))


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"edge": EDGE, **labels}) or 0.0


def frame(camera: str, seq: int, ts_ms: float) -> Frame:
    return Frame(camera, seq, IMAGE, ts_ms, time.perf_counter(), 1.7e12 + ts_ms)


def one_box(track_id: int, y: float, class_id: int = 2) -> Detections:
    return Detections(np.array([[300, y - 40, 340, y]], np.float32), np.array([0.9], np.float32),
                      np.array([class_id]), np.array([track_id]))


def walk(analytics: CameraAnalytics, camera: str, ys: list[float], track_id: int = 4) -> None:
    for seq, y in enumerate(ys):
        analytics.process(frame(camera, seq, 100.0 * seq), one_box(track_id, y), {track_id})


def test_events_become_records_and_move_the_metrics():
    records: list[dict] = []
    identities = IdentityCache(EDGE)
    analytics = CameraAnalytics(EDGE, "cam-a", CFG, ["person", "bicycle", "car"], identities, lines_of(records))
    crossed = metric("vcascade_edge_line_crossings_total", camera="cam-a", line="stop", direction="out", **{"class": "car"})
    entered = metric("vcascade_edge_zone_visits_total", camera="cam-a", zone="dock", event="enter", **{"class": "car"})
    emitted = metric("vcascade_edge_events_total", camera="cam-a", type="line_cross")
    walk(analytics, "cam-a", [150, 220, 300, 300, 300])
    assert [r["type"] for r in records] == ["line_cross", "zone_enter", "zone_dwell"]
    cross = records[0]
    assert cross == {
        "kind": "event", "event_id": cross["event_id"], "type": "line_cross", "camera": "cam-a", "line": "stop",
        "direction": "out", "class": "car", "track_id": 4, "identity_id": None, "text": None,
        "stream_ts_ms": 100.0, "capture_ts_ms": 1.7e12 + 100.0,
    }
    assert len(cross["event_id"]) == 32 and len({r["event_id"] for r in records}) == 3
    assert records[2]["dwell_s"] == pytest.approx(0.2)
    assert metric("vcascade_edge_line_crossings_total", camera="cam-a", line="stop", direction="out",
                  **{"class": "car"}) == crossed + 1
    assert metric("vcascade_edge_zone_visits_total", camera="cam-a", zone="dock", event="enter",
                  **{"class": "car"}) == entered + 1
    assert metric("vcascade_edge_events_total", camera="cam-a", type="line_cross") == emitted + 1
    assert metric("vcascade_edge_zone_occupancy", camera="cam-a", zone="dock", **{"class": "car"}) == 1
    analytics.process(frame("cam-a", 9, 900.0), one_box(4, 450), {4})  # leaves the zone
    assert metric("vcascade_edge_zone_occupancy", camera="cam-a", zone="dock", **{"class": "car"}) == 0
    assert records[-1]["type"] == "zone_exit" and records[-1]["track_lost"] is False


def test_an_event_carries_the_identity_its_track_has_when_it_fires():
    records: list[dict] = []
    identities = IdentityCache(EDGE)
    identities.retain("cam-b", {4})
    identities.remember(_roi("cam-b", 4, "r1", 0.0), TextOutput("AB123", 0.9))
    analytics = CameraAnalytics(EDGE, "cam-b", CFG, ["person", "bicycle", "car"], identities, lines_of(records))
    walk(analytics, "cam-b", [150, 220])
    assert (records[0]["identity_id"], records[0]["text"]) == (None, "AB123")


def test_a_removed_camera_exits_its_tracks_and_its_occupancy_goes_back_to_zero():
    records: list[dict] = []
    analytics = CameraAnalytics(EDGE, "cam-c", CFG, ["person", "bicycle", "car"], IdentityCache(EDGE), lines_of(records))
    walk(analytics, "cam-c", [300, 310])
    assert metric("vcascade_edge_zone_occupancy", camera="cam-c", zone="dock", **{"class": "car"}) == 1
    assert analytics.close() == 1
    assert metric("vcascade_edge_zone_occupancy", camera="cam-c", zone="dock", **{"class": "car"}) == 0
    exit_record = records[-1]
    assert (exit_record["type"], exit_record["track_lost"], exit_record["stream_ts_ms"]) == ("zone_exit", True, 100.0)
    assert exit_record["capture_ts_ms"] == 1.7e12 + 100.0 and exit_record["dwell_s"] == pytest.approx(0.1)


def _roi(camera: str, track_id: int, roi_id: str, stream_ts_ms: float) -> Roi:
    return Roi(roi_id=roi_id, camera=camera, frame_seq=0, stream_ts_ms=stream_ts_ms, capture_unix_ms=0.0,
               xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=2, score=0.5, track_id=track_id)


def _ok(track_id: int, identity_id: int, roi_id: str = "r9") -> Answered:
    pending = PendingRoi(_roi("cam-d", track_id, roi_id, 50.0), 0.0, 0.0, 0.0, 0.0)
    result = Result(roi_id=roi_id, worker="w", output=EmbeddingOutput(identity_id, 0.8, False))
    return Answered(pending, result, {"end_to_end": 1.0})


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def way_back(tmp_path):
    """The edge's way back: identity cache, event updates, output lines to a JSONL sink."""
    out = JsonlSink(JsonlSinkConfig(type="jsonl", path=str(tmp_path / "out.jsonl")), zmq.Context.instance(), EDGE)
    identities = IdentityCache(EDGE)
    identities.retain("cam-d", {4, 5})
    updates = EventUpdates(EDGE, identities)
    yield WayBack(OutputLines([out]), identities, updates), tmp_path / "out.jsonl", updates
    out.close()


def test_an_event_without_identity_is_updated_by_its_tracks_first_result(way_back):
    way_back, path, updates = way_back
    events: list[EventRaised] = []
    analytics = CameraAnalytics(EDGE, "cam-d", CFG, ["person", "bicycle", "car"], way_back.identities, events.append)
    walk(analytics, "cam-d", [150, 220])
    before = metric("vcascade_edge_events_total", camera="cam-d", type="event_update")
    for event in events:
        way_back.deliver(event)
    assert updates.pending() == 1
    way_back.deliver(_ok(5, 3))  # another track's result: no update
    way_back.deliver(_ok(4, 7))
    way_back.deliver(_ok(4, 8, "r10"))  # a later result: the event was updated once already
    lines = _lines(path)
    assert [line.get("status") or line["kind"] for line in lines] == ["event", "ok", "ok", "event_update", "ok"]
    update = lines[3]
    assert update == {"kind": "event_update", "event_id": events[0].event_id, "camera": "cam-d", "track_id": 4,
                      "identity_id": 7, "text": None, "roi_id": "r9", "stream_ts_ms": 50.0}
    assert updates.pending() == 0
    assert metric("vcascade_edge_events_total", camera="cam-d", type="event_update") == before + 1


def _zone_enter(camera: str, track_id: int) -> AnalyticsEvent:
    return AnalyticsEvent("zone_enter", "dock", track_id, "car", 0.0, 0.0)


def test_a_result_that_arrived_while_the_event_was_queued_updates_it_at_once(way_back):
    way_back, path, updates = way_back
    way_back.deliver(_ok(5, 3))
    way_back.deliver(EventRaised("cam-d", _zone_enter("cam-d", 5), None, "e1"))
    assert [line.get("status") or line["kind"] for line in _lines(path)] == ["ok", "event", "event_update"]
    assert updates.pending() == 0


def test_pending_updates_are_bounded(way_back):
    _, _, updates = way_back
    for track_id in range(MAX_PENDING_TRACKS + 3):
        updates.follow_ups(EventRaised("cam-x", _zone_enter("cam-x", track_id), None, f"e{track_id}"))
    assert updates.pending() == MAX_PENDING_TRACKS and updates.given_up == 3


def test_edge_node_runs_the_camera_analytics_after_tracking(models_dir, free_port):
    """The real node: a camera with analytics turns its tracks into event records for the link."""
    raw = demo_data()
    del raw["cameras"]["street-2"]
    raw["cameras"]["street-1"]["analytics"] = {"lines": [{"name": "mid", "points": [[0, 240], [640, 240]]}]}
    for broker in raw["brokers"].values():
        broker["frontend_port"], broker["backend_port"], broker["metrics_port"] = free_port(), free_port(), free_port()
    dep = Deployment.model_validate(raw)
    detector, _ = load_detector(dep.edges["edge-1"], models_dir)
    ctx = zmq.Context()
    identities = IdentityCache("edge-1")
    settings = EdgeSettings.from_deployment(dep, "edge-1")
    link = BrokerLink(settings, ctx, WayBack(OutputLines([]), identities))  # never started: events wait in its outbox
    node = EdgeNode(settings, detector, link, identities)
    labels = {"edge": "edge-1", "camera": "street-1", "type": "line_cross"}
    before = REGISTRY.get_sample_value("vcascade_edge_events_total", labels) or 0.0
    for seq, y in enumerate(range(180, 320, 20)):  # small steps: the tracker keeps one track
        box = Detections(np.array([[300, y - 60, 340, y]], np.float32), np.array([0.9]), np.array([0]))
        now_s = time.perf_counter()
        node.handle_detections(Frame("street-1", seq, IMAGE, 40.0 * seq, now_s, 1.7e12), box, now_s, now_s)
    assert (REGISTRY.get_sample_value("vcascade_edge_events_total", labels) or 0.0) == before + 1
    ctx.destroy(linger=0)

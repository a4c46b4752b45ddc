"""Exhaustive tests of the pure line and zone state machine over synthetic trajectories (no clock, no I/O):
crossings both ways, jitter on the line, tracks lost and found again, zones entered and left, dwell in stream
time; property tests over random trajectories."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcascade.core.config import AnalyticsConfig
from vcascade.core.detections import Detections
from vcascade.edge.analytics.counting import AnalyticsEvent, TrackAnalytics

CLASSES = ["person", "bicycle", "car"]
FRAME_HW = (480, 640)


def boxes_at(points: dict[int, tuple[float, float]], class_id: int | dict[int, int] = 0) -> Detections:
    """Detections whose bottom-centre anchors are ``points`` (track id -> (x, y) px), boxes 20 x 20 px."""
    ids = list(points)
    xyxy = np.array([[x - 10, y - 20, x + 10, y] for x, y in points.values()], np.float32).reshape(-1, 4)
    classes = [class_id[t] if isinstance(class_id, dict) else class_id for t in ids]
    return Detections(xyxy, np.full(len(ids), 0.9, np.float32), np.array(classes, np.int64), np.array(ids, np.int64))


def run(
    analytics: TrackAnalytics, frames: list[dict[int, tuple[float, float]]], step_ms: float = 100.0,
    alive: set[int] | None = None, class_id: int | dict[int, int] = 0,
) -> list[AnalyticsEvent]:
    """Feed frames at ``step_ms`` apart; every track seen so far stays alive unless ``alive`` says otherwise."""
    events, seen = [], set()
    for k, points in enumerate(frames):
        seen |= set(points)
        events += analytics.update(
            boxes_at(points, class_id), k * step_ms, 1.7e12 + k * step_ms, FRAME_HW, seen if alive is None else alive
        )
    return events


def line(**fields) -> TrackAnalytics:
    """One horizontal line from (100, 200) to (500, 200); ``in`` is above it (left looking from start to end)."""
    cfg = {"lines": [{"name": "stop", "points": [[100, 200], [500, 200]], **fields}], "hysteresis_px": 8}
    return TrackAnalytics(AnalyticsConfig(**cfg), CLASSES)


def crossings(events: list[AnalyticsEvent]) -> list[tuple[int, str]]:
    return [(e.track_id, e.direction) for e in events if e.type == "line_cross"]


def path(track_id: int, ys: list[float], x: float = 300.0) -> list[dict[int, tuple[float, float]]]:
    return [{track_id: (x, y)} for y in ys]


# ---------------------------------------------------------------- lines


def test_crossing_downwards_counts_out_and_upwards_counts_in():
    a = line()
    assert crossings(run(a, path(1, [150, 180, 220, 260]))) == [(1, "out")]
    b = line()
    assert crossings(run(b, path(2, [260, 220, 180, 150]))) == [(2, "in")]


def test_in_side_right_swaps_the_directions():
    a = line(in_side="right")
    assert crossings(run(a, path(1, [150, 260, 150]))) == [(1, "in"), (1, "out")]


def test_the_event_carries_stream_time_capture_time_and_class():
    a = line()
    (event,) = run(a, path(1, [150, 260]), step_ms=40.0, class_id=2)
    assert (event.type, event.place, event.class_name) == ("line_cross", "stop", "car")
    assert event.stream_ts_ms == 40.0 and event.capture_unix_ms == 1.7e12 + 40.0


def test_jitter_inside_the_band_counts_nothing():
    a = line()
    assert run(a, path(1, [150, 195, 205, 194, 207, 193, 206, 150])) == []


def test_jitter_after_a_crossing_counts_once():
    a = line()
    assert crossings(run(a, path(1, [150, 220, 199, 207, 196, 204, 193, 230, 260]))) == [(1, "out")]


def test_without_hysteresis_every_change_of_sign_counts():
    cfg = AnalyticsConfig(lines=[{"name": "l", "points": [[100, 200], [500, 200]]}], hysteresis_px=0)
    a = TrackAnalytics(cfg, CLASSES)
    assert crossings(run(a, path(1, [195, 205, 195, 200, 205]))) == [(1, "out"), (1, "in"), (1, "out")]


def test_a_track_first_seen_in_the_band_has_no_side_until_it_leaves_it():
    a = line()
    assert run(a, path(1, [202, 198, 230, 260])) == []
    assert crossings(run(a, [{1: (300, 150)}])) == [(1, "in")]


def test_a_crossing_beyond_the_segment_end_does_not_count():
    a = line()
    assert run(a, path(1, [150, 260], x=50.0)) == []
    assert run(a, path(2, [150, 260], x=560.0)) == []


def test_walking_round_the_end_of_the_line_changes_side_without_counting():
    a = line()
    frames = [{1: (300, 150)}, {1: (600, 150)}, {1: (600, 260)}, {1: (300, 260)}, {1: (300, 150)}]
    assert crossings(run(a, frames)) == [(1, "in")]  # only the last step crosses the segment


def test_a_diagonal_step_across_the_segment_counts():
    a = line()
    assert crossings(run(a, [{1: (90, 150)}, {1: (130, 250)}])) == [(1, "out")]


def test_a_track_lost_and_found_on_the_same_side_counts_once():
    a = line()
    frames = [{1: (300, 150)}, {1: (300, 250)}, {}, {}, {}, {1: (300, 260)}, {1: (300, 270)}]
    assert crossings(run(a, frames)) == [(1, "out")]


def test_a_track_found_on_the_other_side_counts_the_crossing_it_made_unseen():
    a = line()
    frames = [{1: (300, 150)}, {}, {}, {1: (300, 260)}]
    assert crossings(run(a, frames)) == [(1, "out")]


def test_a_dropped_track_is_forgotten_and_a_new_id_starts_without_a_side():
    a = line()
    run(a, [{1: (300, 150)}])
    assert a.update(boxes_at({}), 100.0, 0.0, FRAME_HW, set()) == []
    assert a.tracks_followed == 0
    assert run(a, [{2: (300, 260)}]) == []


def test_class_filter_counts_only_its_classes_and_keeps_the_side_of_the_others():
    a = line(classes=["car"])
    assert run(a, path(1, [150, 260]), class_id=0) == []
    assert crossings(run(a, path(2, [150, 260]), class_id=2)) == [(2, "out")]


def test_a_class_the_detector_does_not_have_is_refused_at_start():
    cfg = AnalyticsConfig(zones=[{"name": "z", "polygon": [[0, 0], [9, 0], [0, 9]], "classes": ["forklift"]}])
    with pytest.raises(ValueError, match=r"analytics zones\[0\]\.classes: \['forklift'\] not among the detector's"):
        TrackAnalytics(cfg, CLASSES)


def test_untracked_detections_are_ignored():
    a = line()
    for k, y in enumerate([150, 260]):
        det = Detections(np.array([[290, y - 20, 310, y]], np.float32), np.array([0.9], np.float32), np.array([0]))
        assert a.update(det, k * 100.0, 0.0, FRAME_HW, set()) == []


def test_many_tracks_at_once_each_count_once():
    a = line()
    n = 150  # more than the initial state rows: the arrays grow
    frames = [{t: (100 + 2 * t, 150) for t in range(n)}, {t: (100 + 2 * t, 260) for t in range(n)}]
    assert sorted(crossings(run(a, frames))) == [(t, "out") for t in range(n)]


@pytest.mark.parametrize(
    ("anchor", "counted"), [("bottom_center", True), ("center", False), ("top_center", False)]
)
def test_the_anchor_point_decides_which_part_of_the_box_crosses(anchor, counted):
    cfg = AnalyticsConfig(lines=[{"name": "l", "points": [[100, 200], [500, 200]]}], anchor=anchor)
    a = TrackAnalytics(cfg, CLASSES)
    # bottoms go 150 -> 230; centres 140 -> 220 (crosses too) ... so use boxes 100 px high
    frames = [(300, 120), (300, 250)]
    events = []
    for k, (x, y) in enumerate(frames):
        det = Detections(np.array([[x - 10, y - 100, x + 10, y]], np.float32), np.array([0.9], np.float32),
                         np.array([0]), np.array([1]))
        events += a.update(det, k * 100.0, 0.0, FRAME_HW, {1})
    assert bool(crossings(events)) == counted


def test_normalised_coordinates_scale_with_the_frame():
    cfg = AnalyticsConfig(coordinates="normalized", lines=[{"name": "l", "points": [[0.0, 0.5], [1.0, 0.5]]}])
    a = TrackAnalytics(cfg, CLASSES)
    assert crossings(run(a, path(1, [200, 280]))) == [(1, "out")]  # the line is at 0.5 * 480 = 240 px
    b = TrackAnalytics(cfg, CLASSES)
    events = [e for y in (500, 600, 500) for e in b.update(boxes_at({1: (300, y)}), y, 0.0, (1080, 1920), {1})]
    assert crossings(events) == [(1, "out"), (1, "in")]  # at 540 px in a 1080-high frame


# ---------------------------------------------------------------- zones


def zone(dwell_s: float | None = None, classes: list[str] | None = None, hysteresis_px: float = 8) -> TrackAnalytics:
    """A square zone 100..300 x 100..300."""
    polygon = [[100, 100], [300, 100], [300, 300], [100, 300]]
    cfg = AnalyticsConfig(
        zones=[{"name": "dock", "polygon": polygon, "dwell_s": dwell_s, "classes": classes}], hysteresis_px=hysteresis_px
    )
    return TrackAnalytics(cfg, CLASSES)


def kinds(events: list[AnalyticsEvent]) -> list[tuple[str, int]]:
    return [(e.type, e.track_id) for e in events]


def test_a_box_entering_and_leaving_a_zone():
    a = zone()
    events = run(a, path(1, [50, 150, 200, 250, 350], x=200.0))
    assert kinds(events) == [("zone_enter", 1), ("zone_exit", 1)]
    assert events[0].stream_ts_ms == 100.0 and events[1].stream_ts_ms == 400.0
    assert events[1].dwell_s == pytest.approx(0.3) and events[1].track_lost is False


def test_occupancy_counts_the_tracks_inside_by_class():
    a = zone()
    run(a, [{1: (150, 150), 2: (200, 200), 3: (400, 400)}], class_id={1: 0, 2: 2, 3: 0})
    assert a.occupancy() == {("dock", "person"): 1, ("dock", "car"): 1}
    run(a, [{1: (400, 150), 2: (200, 200)}], class_id={1: 0, 2: 2})
    assert a.occupancy() == {("dock", "car"): 1}


def test_jitter_on_the_zone_edge_does_not_flap():
    a = zone()
    events = run(a, path(1, [96, 104, 97, 103, 150, 297, 304, 295, 320], x=200.0))
    assert kinds(events) == [("zone_enter", 1), ("zone_exit", 1)]


def test_a_track_appearing_inside_enters():
    a = zone()
    assert kinds(run(a, [{1: (200, 200)}])) == [("zone_enter", 1)]


def test_dwell_fires_once_per_visit_in_stream_time():
    a = zone(dwell_s=1.0)
    ts = [0.0, 300.0, 999.0, 1000.0, 1500.0, 2500.0]  # irregular frame times: PTS, not frame counts
    events = []
    for t in ts:
        events += a.update(boxes_at({1: (200, 200)}), t, 0.0, FRAME_HW, {1})
    assert kinds(events) == [("zone_enter", 1), ("zone_dwell", 1)]
    assert events[1].stream_ts_ms == 1000.0 and events[1].dwell_s == 1.0
    events = a.update(boxes_at({1: (400, 400)}), 2600.0, 0.0, FRAME_HW, {1})
    events += a.update(boxes_at({1: (200, 200)}), 2700.0, 0.0, FRAME_HW, {1})
    events += a.update(boxes_at({1: (200, 200)}), 3700.0, 0.0, FRAME_HW, {1})
    assert kinds(events) == [("zone_exit", 1), ("zone_enter", 1), ("zone_dwell", 1)]
    assert events[0].dwell_s == 2.6


def test_a_short_visit_gets_no_dwell_event():
    a = zone(dwell_s=1.0)
    assert kinds(run(a, path(1, [200, 200, 400], x=200.0), step_ms=400.0)) == [("zone_enter", 1), ("zone_exit", 1)]


def test_a_track_lost_inside_and_found_again_does_not_re_enter():
    a = zone()
    events = run(a, [{1: (200, 200)}, {}, {}, {1: (210, 210)}])
    assert kinds(events) == [("zone_enter", 1)]


def test_a_track_dropped_inside_exits_at_its_last_time():
    a = zone()
    run(a, [{1: (200, 200)}, {1: (210, 210)}])
    events = a.update(boxes_at({}), 900.0, 0.0, FRAME_HW, set())
    assert kinds(events) == [("zone_exit", 1)]
    assert events[0].track_lost and events[0].stream_ts_ms == 100.0 and events[0].dwell_s == 0.1
    assert a.occupancy() == {}


def test_zone_class_filter_and_the_class_at_entry():
    a = zone(classes=["person"])
    assert run(a, path(1, [200, 200], x=200.0), class_id=2) == []
    events = run(a, path(2, [200, 210], x=200.0), class_id=0)
    events += a.update(boxes_at({2: (400, 400)}, class_id=2), 500.0, 0.0, FRAME_HW, {2})  # class flickers
    assert [(e.type, e.class_name) for e in events] == [("zone_enter", "person"), ("zone_exit", "person")]


def test_concave_zone():
    cfg = AnalyticsConfig(zones=[{"name": "u", "polygon": [[0, 0], [300, 0], [300, 300], [200, 300], [200, 100],
                                                          [100, 100], [100, 300], [0, 300]]}])
    a = TrackAnalytics(cfg, CLASSES)
    assert run(a, [{1: (150, 250)}]) == []  # in the notch
    assert kinds(run(a, [{2: (50, 250)}])) == [("zone_enter", 2)]


def test_lines_and_zones_together_in_event_order():
    cfg = AnalyticsConfig(
        lines=[{"name": "l", "points": [[0, 200], [600, 200]]}],
        zones=[{"name": "z", "polygon": [[0, 220], [600, 220], [600, 400], [0, 400]]}],
    )
    a = TrackAnalytics(cfg, CLASSES)
    assert kinds(run(a, path(1, [150, 300], x=200.0))) == [("line_cross", 1), ("zone_enter", 1)]


# ---------------------------------------------------------------- properties

ys = st.lists(st.floats(0, 400, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(ys)
def test_crossings_alternate_and_match_the_change_of_side(trajectory):
    """Along a vertical path through the segment, crossings alternate in/out, and their number is the number of
    changes of clear side (distance > hysteresis) along the path."""
    a = line()
    got = [d for _, d in crossings(run(a, path(1, trajectory)))]
    assert all(x != y for x, y in itertools.pairwise(got))
    sides = [1 if y < 192 else -1 for y in trajectory if abs(y - 200) > 8]
    changes = [s for prev, s in itertools.pairwise(sides) if s != prev]
    assert got == ["in" if s > 0 else "out" for s in changes]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-8, 8, allow_nan=False), min_size=1, max_size=40), st.sampled_from([150.0, 250.0]))
def test_jitter_within_the_band_after_any_start_counts_nothing(offsets, start_y):
    a = line()
    assert run(a, path(1, [start_y, *(200 + o for o in offsets), start_y])) == []


points = st.tuples(st.floats(0, 400, allow_nan=False), st.floats(0, 400, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.integers(0, 4), points, max_size=5), min_size=1, max_size=30), st.data())
def test_zone_enters_and_exits_alternate_and_occupancy_is_their_difference(frames, data):
    a = zone(dwell_s=0.5)
    events = run(a, frames)
    last: dict[int, str] = {}
    for e in events:
        if e.type == "zone_dwell":
            assert last.get(e.track_id) == "zone_enter"
            continue
        assert last.get(e.track_id, "zone_exit") != e.type
        last[e.track_id] = e.type
    inside = sum(1 for t in last.values() if t == "zone_enter")
    assert sum(a.occupancy().values()) == inside
    drop = data.draw(st.sets(st.sampled_from(sorted(last) or [0])))
    kept = set(last) - drop
    gone = a.update(boxes_at({}), 10_000.0, 0.0, FRAME_HW, kept)
    assert {e.track_id for e in gone} == {t for t in drop if last.get(t) == "zone_enter"}
    assert all(e.track_lost for e in gone)


@settings(max_examples=300, deadline=None)
@given(ys, st.data())
def test_frames_where_the_track_is_lost_never_add_crossings(trajectory, data):
    """A track unseen on some frames (lost, still kept by the tracker) crosses at most as often as when seen on
    every frame: once per change of clear side among the frames it was seen in (a crossing made unseen counts
    once when it is found again)."""
    seen = data.draw(st.lists(st.booleans(), min_size=len(trajectory), max_size=len(trajectory)))
    full = crossings(run(line(), path(1, trajectory)))
    gappy = [d for _, d in crossings(run(line(), [{1: (300, y)} if s else {} for y, s in zip(trajectory, seen)]))]
    assert len(gappy) <= len(full)
    sides = [1 if y < 192 else -1 for y, s in zip(trajectory, seen) if s and abs(y - 200) > 8]
    assert gappy == ["in" if s > 0 else "out" for prev, s in itertools.pairwise(sides) if s != prev]

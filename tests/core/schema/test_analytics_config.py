"""The analytics section of a camera: good files load; bad geometry, units, names and classes give one clear line
naming the key path, the bad value and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vcascade.core.config import AnalyticsConfig, ConfigError, load_config
from vcascade.core.schema.analytics import first_crossing

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"
TRAFFIC = Path(__file__).resolve().parents[3] / "configs" / "traffic.yaml"


def _error(tmp_path: Path, analytics: dict) -> str:
    data = yaml.safe_load(DEMO.read_text())
    data["cameras"]["street-1"]["analytics"] = analytics
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


def test_traffic_example_is_valid():
    dep = load_config(TRAFFIC)
    analytics = next(cam.analytics for cam in dep.cameras.values() if cam.analytics is not None)
    assert analytics.lines and analytics.zones


def test_defaults():
    cfg = AnalyticsConfig()
    assert (cfg.coordinates, cfg.anchor, cfg.hysteresis_px, cfg.lines, cfg.zones) == ("pixels", "bottom_center", 8.0, [], [])


@pytest.mark.parametrize(
    ("analytics", "expected"),
    [
        ({"lines": [{"name": "a", "points": [[5, 5], [5, 5]]}]},
         "cameras.street-1.analytics.lines[0].points = [[5.0, 5.0], [5.0, 5.0]]: the two points are the same"),
        ({"lines": [{"name": "a", "points": [[5, 5]]}]}, "cameras.street-1.analytics.lines[0].points"),
        ({"zones": [{"name": "z", "polygon": [[0, 0], [1, 1]]}]},
         "cameras.street-1.analytics.zones[0].polygon = [[0, 0], [1, 1]]: expected list should have at least 3 items"),
        ({"zones": [{"name": "z", "polygon": [[0, 0], [10, 10], [10, 0], [0, 10]]}]},
         ("cameras.street-1.analytics.zones[0].polygon = [[0.0, 0.0], [10.0, 10.0], [10.0, 0.0], [0.0, 10.0]]: "
          "edges 0 and 2 cross or overlap")),
        ({"coordinates": "normalized", "zones": [{"name": "z", "polygon": [[0, 0], [1.5, 0], [0, 1]]}]},
         "cameras.street-1.analytics.zones[0].polygon = [1.5, 0.0]: outside 0..1"),
        ({"coordinates": "normalized", "lines": [{"name": "a", "points": [[0, -0.1], [1, 1]]}]},
         "cameras.street-1.analytics.lines[0].points = [0.0, -0.1]: outside 0..1"),
        ({"lines": [{"name": "a", "points": [[0, 0], [1, 1]]}, {"name": "a", "points": [[0, 0], [2, 1]]}]},
         "cameras.street-1.analytics.lines[1].name = 'a': used twice"),
        ({"lines": [{"name": "a", "points": [[0, 0], [1, 1]], "classes": ["dragon"]}]},
         "cameras.street-1.analytics.lines[0].classes[0] = 'dragon': expected one of the detector's class names"),
        ({"zones": [{"name": "z", "polygon": [[0, 0], [9, 0], [0, 9]], "classes": ["unicorn"]}]},
         "cameras.street-1.analytics.zones[0].classes[0] = 'unicorn': expected one of the detector's class names"),
        ({"zones": [{"name": "z", "polygon": [[0, 0], [9, 0], [0, 9]], "dwell_s": 0}]},
         "cameras.street-1.analytics.zones[0].dwell_s = 0: expected a value greater than 0"),
        ({"anchor": "feet"}, "cameras.street-1.analytics.anchor = 'feet': expected 'bottom_center'"),
        ({"hysteresis_px": -1}, "cameras.street-1.analytics.hysteresis_px = -1"),
    ],
)
def test_bad_analytics_name_the_key_and_the_reason(tmp_path, analytics, expected):
    assert expected in _error(tmp_path, analytics)


@pytest.mark.parametrize(
    ("polygon", "crossing"),
    [
        ([(0, 0), (10, 0), (10, 10), (0, 10)], None),
        ([(0, 0), (10, 0), (5, 5), (10, 10), (0, 10)], None),  # concave
        ([(0, 0), (10, 10), (10, 0), (0, 10)], (0, 2)),  # bow tie
        ([(0, 0), (5, 0), (10, 0)], (0, 2)),  # no area: the last edge runs back over the first
        ([(0, 0), (10, 0), (10, 0), (0, 10)], (0, 1)),  # a corner listed twice
        ([(0, 0), (10, 0), (10, 10), (5, 0), (0, 10)], (0, 2)),  # touches an edge at a corner
    ],
)
def test_first_crossing(polygon, crossing):
    assert first_crossing(polygon) == crossing


# ---------------------------------------------------------------- issue 28, item 9: numbers and size bounded


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 1e308, -2e5])
def test_a_coordinate_that_is_not_finite_or_out_of_bounds_is_refused_on_its_key(tmp_path, bad):
    """NaN, infinities and 1e308 passed and then silently produced no events (1e308 overflows in the products)."""
    message = _error(tmp_path, {"lines": [{"name": "gate", "points": [[0, 0], [bad, 10]]}]})
    assert "cameras.street-1.analytics.lines[0].points" in message, message
    message = _error(tmp_path, {"zones": [{"name": "z", "polygon": [[0, 0], [100, 0], [bad, 100]]}]})
    assert "cameras.street-1.analytics.zones[0].polygon" in message, message


def test_more_corners_than_the_camera_limit_are_refused(tmp_path):
    from vcascade.core.schema.analytics import MAX_CORNERS

    square = [[0, 0], [100, 0], [100, 100], [0, 100]]
    zones = [{"name": f"z{i}", "polygon": square} for i in range(MAX_CORNERS // 4 + 1)][:256]
    lines = [{"name": f"l{i}", "points": [[0, i], [10, i]]} for i in range(256)]
    message = _error(tmp_path, {"zones": zones, "lines": lines})
    assert "cameras.street-1.analytics.zones" in message and f"at most {MAX_CORNERS} corners" in message


def _scalar_first_crossing(polygon):
    """The pairwise loop the vectorised check replaced (reference)."""
    from vcascade.core.schema.analytics import _fold_back

    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    def on(a, b, p):
        return min(a[0], b[0]) <= p[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= p[1] <= max(a[1], b[1])

    def meet(a, b, c, d):
        d1, d2, d3, d4 = orient(c, d, a), orient(c, d, b), orient(a, b, c), orient(a, b, d)
        if ((d1 > 0 > d2) or (d1 < 0 < d2)) and ((d3 > 0 > d4) or (d3 < 0 < d4)):
            return True
        return (d1 == 0 and on(c, d, a)) or (d2 == 0 and on(c, d, b)) or (d3 == 0 and on(a, b, c)) or (
            d4 == 0 and on(a, b, d))

    n = len(polygon)
    edges = [(polygon[i], polygon[(i + 1) % n]) for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if j == i + 1 or (i == 0 and j == n - 1):
                if _fold_back(edges[i], edges[j], shared_end_of_first=(j == i + 1)):
                    return i, j
            elif meet(*edges[i], *edges[j]):
                return i, j
    return None


def test_the_vectorised_crossing_check_answers_as_the_pairwise_loop():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    point = st.tuples(st.integers(0, 6).map(float), st.integers(0, 6).map(float))  # small grid: many collinear cases

    @settings(max_examples=400, deadline=None)
    @given(st.lists(point, min_size=3, max_size=9))
    def same(polygon):
        assert first_crossing(polygon) == _scalar_first_crossing(polygon)

    same()

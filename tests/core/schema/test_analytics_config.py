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

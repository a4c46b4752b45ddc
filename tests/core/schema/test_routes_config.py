"""Config checks of `roi.routes` and `cameras.<name>.routes`: one clear line per problem, with its key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data
from vcascade.core.config import ConfigError, load_config

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _two_recognizers(routes=None) -> dict:
    """The demo with recognizers `people` and `vehicles`, one worker each on broker-1."""
    data = demo_data()
    embedder = data["recognizers"].pop("mobilenetv2-embedder")
    data["recognizers"] = {"people": embedder, "vehicles": {**embedder, "split_points": []}}
    worker = data["workers"].pop("worker-1")
    data["workers"] = {
        "w-people": {**worker, "recognizer": "people"},
        "w-vehicles": {**worker, "recognizer": "vehicles", "devices": ["cpu"], "metrics_port": 9104},
    }
    if routes is not None:
        data["edges"]["edge-1"]["roi"]["routes"] = routes
    return data


def _load(tmp_path, data):
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _error(tmp_path, data) -> str:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, data)
    return str(info.value)


def test_valid_routes_load(tmp_path):
    routes = [{"recognizer": "vehicles", "classes": ["car", "bus"]}, {"recognizer": "people"}]
    dep = _load(tmp_path, _two_recognizers(routes))
    assert [r.recognizer for r in dep.routes_of("street-1")] == ["vehicles", "people"]
    assert dep.recognizers_served("edge-1") == ["people", "vehicles"]


def test_several_recognizers_need_routes(tmp_path):
    msg = _error(tmp_path, _two_recognizers())
    assert "edges.edge-1.roi.routes: missing (required: workers on its brokers run several recognizers" in msg
    assert "['people', 'vehicles']" in msg


def test_every_camera_with_its_own_routes_is_enough(tmp_path):
    data = _two_recognizers()
    for cam in data["cameras"].values():
        cam["routes"] = [{"recognizer": "people", "classes": ["person"]}]
    assert _load(tmp_path, data).routes_of("street-2")[0].recognizer == "people"


def test_unknown_and_unserved_recognizers(tmp_path):
    data = _two_recognizers([{"recognizer": "ocr"}])
    assert "edges.edge-1.roi.routes[0].recognizer = 'ocr': expected one of ['people', 'vehicles']" in _error(
        tmp_path, data
    )
    data = _two_recognizers([{"recognizer": "people", "classes": ["person"]}, {"recognizer": "vehicles"}])
    data["recognizers"]["spare"] = data["recognizers"]["people"]
    data["cameras"]["street-2"]["routes"] = [{"recognizer": "spare"}]
    assert (
        "cameras.street-2.routes[0].recognizer = 'spare': expected a recognizer run by a worker on the edge's "
        "brokers (['people', 'vehicles'])" in _error(tmp_path, data)
    )


def test_bad_classes_and_unreachable_routes(tmp_path):
    routes = [
        {"recognizer": "people", "classes": ["person", "unicorn"]},
        {"recognizer": "vehicles", "classes": ["car", "person"]},
        {"recognizer": "people"},
        {"recognizer": "vehicles", "classes": ["bus"]},
    ]
    lines = _error(tmp_path, _two_recognizers(routes)).splitlines()
    assert any("edges.edge-1.roi.routes[0].classes[1] = 'unicorn': expected one of the detector's class names" in l
               for l in lines)  # fmt: skip
    assert any("edges.edge-1.roi.routes[1].classes[1] = 'person': already routed by routes[0]" in l for l in lines)
    assert any("edges.edge-1.roi.routes[3]: never used (routes[2] has no `classes` and takes every class)" in l
               for l in lines)  # fmt: skip
    assert len(lines) == 3


def test_empty_routes_or_classes_are_rejected(tmp_path):
    assert "edges.edge-1.roi.routes = []" in _error(tmp_path, _two_recognizers([]))
    msg = _error(tmp_path, _two_recognizers([{"recognizer": "people", "classes": []}]))
    assert "edges.edge-1.roi.routes[0].classes = []" in msg


def test_a_route_may_keep_its_crops_as_cut_where_the_edge_shrinks_them(tmp_path):
    data = _two_recognizers([{"recognizer": "vehicles", "classes": ["car"], "crop_max_side_px": 0},
                             {"recognizer": "people", "crop_max_side_px": 128}])  # fmt: skip
    data["edges"]["edge-1"]["roi"]["crop_max_side_px"] = 96
    dep = _load(tmp_path, data)
    assert dep.edges["edge-1"].roi.crop_max_side_px == 96
    assert [r.crop_max_side_px for r in dep.routes_of("street-1")] == [0, 128]


@pytest.mark.parametrize(
    ("where", "value", "key"),
    [("route", 16, "edges.edge-1.roi.routes[0].crop_max_side_px = 16"),
     ("route", -1, "edges.edge-1.roi.routes[0].crop_max_side_px"),
     ("edge", 31, "edges.edge-1.roi.crop_max_side_px = 31"),
     ("camera", 8, "cameras.street-1.routes[0].crop_max_side_px = 8")],
)
def test_a_bad_crop_size_is_one_line_naming_its_key(tmp_path, where, value, key):
    data = _two_recognizers([{"recognizer": "people"}])
    if where == "route":
        data["edges"]["edge-1"]["roi"]["routes"][0]["crop_max_side_px"] = value
    elif where == "edge":
        data["edges"]["edge-1"]["roi"]["crop_max_side_px"] = value
    else:
        data["cameras"]["street-1"]["routes"] = [{"recognizer": "people", "crop_max_side_px": value}]
    msg = _error(tmp_path, data)
    assert key in msg and ("expected 0 (as cut) or at least 32 px" in msg or "greater than or equal to 0" in msg)
    assert len(msg.strip().splitlines()) == 1

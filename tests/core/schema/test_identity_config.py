"""The ``head.identity`` section of an embedding recognizer (issue 16): the embedded store by default, and a
topology that may only name cameras of the deployment."""

from __future__ import annotations

from tests.core.schema.test_routes_config import _error, _load
from tests.demo import demo_data

load, error = _load, _error  # loads a deployment dict; the ConfigError message it raises
RECOGNIZER = "mobilenetv2-embedder"
"""The demo's embedding recognizer."""


def _with_links(links: list[dict]) -> dict:
    data = demo_data()
    data["recognizers"][RECOGNIZER]["head"]["identity"] = {"topology": {"links": links}}
    return data


def test_the_identity_store_is_the_embedded_sqlite_file_by_default(tmp_path):
    identity = load(tmp_path, demo_data()).recognizers[RECOGNIZER].head.identity
    assert identity.store.type == "sqlite" and identity.topology is None


def test_topology_links_between_cameras_of_the_deployment_load(tmp_path):
    dep = load(tmp_path, _with_links([{"source": "street-1", "target": "street-2", "min_s": 2, "max_s": 30}]))
    (link,) = dep.recognizers[RECOGNIZER].head.identity.topology.links
    assert (link.source, link.target, link.min_s, link.max_s) == ("street-1", "street-2", 2.0, 30.0)


def test_a_topology_link_naming_an_unknown_camera_is_an_error_naming_its_key_path(tmp_path):
    links = [
        {"source": "street-1", "target": "street-2", "max_s": 30},
        {"source": "street-9", "target": "street-1", "max_s": 30},
        {"source": "street-2", "target": "gate-3", "max_s": 30},
    ]
    msg = error(tmp_path, _with_links(links))
    key = f"recognizers.{RECOGNIZER}.head.identity.topology.links"
    cameras = "expected one of the cameras ['street-1', 'street-2']"
    assert f"{key}[1].source = 'street-9': {cameras}" in msg
    assert f"{key}[2].target = 'gate-3': {cameras}" in msg
    assert f"{key}[0]" not in msg and f"{key}[1].target" not in msg and f"{key}[2].source" not in msg


def test_a_negative_centroid_window_is_an_error_naming_its_key_path(tmp_path):
    data = demo_data()
    data["recognizers"][RECOGNIZER]["head"]["identity"] = {"centroid_window": 20}
    assert load(tmp_path, data).recognizers[RECOGNIZER].head.identity.centroid_window == 20
    data["recognizers"][RECOGNIZER]["head"]["identity"] = {"centroid_window": -1}
    assert f"recognizers.{RECOGNIZER}.head.identity.centroid_window = -1" in error(tmp_path, data)

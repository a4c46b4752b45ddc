"""EdgeSettings: what one edge needs of the deployment file, taken once; its routes follow the file's rule."""

from __future__ import annotations

import pytest

from tests.demo import demo_data
from vcascade.core.config import CameraConfig, Deployment, RouteConfig
from vcascade.core.schema.edge_settings import EdgeSettings


@pytest.mark.parametrize("both_recognizers", [False, True])
def test_settings_hold_the_edges_section_and_the_facts_it_takes_from_the_others(both_recognizers):
    dep = Deployment.model_validate(demo_data(both_recognizers=both_recognizers))
    for name, edge in dep.edges.items():
        settings = EdgeSettings.from_deployment(dep, name)
        assert settings.edge is edge and settings.cameras == dep.cameras_of(name)
        assert list(settings.broker_endpoints) == edge.brokers  # the link's broker indices
        assert settings.broker_endpoints == {b: dep.brokers[b].endpoint("frontend") for b in edge.brokers}
        assert (settings.heartbeat, settings.security, settings.metrics, settings.ui) == (
            dep.heartbeat, dep.security, dep.metrics, dep.ui
        )
        for camera, cam in settings.cameras.items():
            assert settings.routes_for(cam) == dep.routes_of(camera)


def test_routes_of_a_camera_added_at_run_time():
    dep = Deployment.model_validate(demo_data(both_recognizers=True))
    name = next(iter(dep.edges))
    settings = EdgeSettings.from_deployment(dep, name)
    added = CameraConfig(url="x.mp4", edge=name)
    assert settings.routes_for(added) == dep.routes_for(name, added)
    own = CameraConfig(url="x.mp4", edge=name, routes=[RouteConfig(recognizer=sorted(dep.recognizers)[0])])
    assert settings.routes_for(own) == list(own.routes)


def test_an_unknown_edge_is_a_key_error():
    with pytest.raises(KeyError):
        EdgeSettings.from_deployment(Deployment.model_validate(demo_data()), "no-such-edge")

"""Camera topology pruning (center/identity/topology.py): every case of the candidate rule."""

from __future__ import annotations

import numpy as np
import pytest

from vcascade.center.identity.topology import UNKNOWN, Topology
from vcascade.core.config import TopologyConfig

LINKS = [("gate", "street", 5.0, 30.0), ("street", "park", 60.0, 120.0)]


@pytest.fixture
def topo() -> Topology:
    return Topology(LINKS)


def mask(topo: Topology, camera: str, t_s: float, last: list[tuple[str, float]]) -> list[bool]:
    codes = np.array([topo.code(c) for c, _ in last], np.int32)
    times = np.array([t for _, t in last], np.float64)
    return topo.candidates(camera, t_s, codes, times).tolist()


def test_codes_cover_the_named_cameras_only(topo):
    assert topo.cameras == ["gate", "park", "street"]
    assert topo.code("gate") == 0 and topo.code("nowhere") == UNKNOWN


@pytest.mark.parametrize(("elapsed_s", "allowed"), [
    (4.9, False), (5.0, True), (17.0, True), (30.0, True), (30.1, False), (-1.0, False),
])
def test_a_linked_camera_is_a_candidate_only_within_the_travel_window(topo, elapsed_s, allowed):
    assert mask(topo, "street", 1000.0, [("gate", 1000.0 - elapsed_s)]) == [allowed]


def test_links_are_directed(topo):
    assert mask(topo, "gate", 1010.0, [("street", 1000.0)]) == [False]


def test_links_do_not_chain(topo):
    assert mask(topo, "park", 1090.0, [("gate", 1000.0)]) == [False]  # gate -> street -> park is two hops


def test_the_same_camera_is_always_a_candidate(topo):
    assert mask(topo, "park", 1e6, [("park", 0.0), ("park", 2e6)]) == [True, True]


def test_identities_seen_on_unnamed_cameras_are_candidates_everywhere(topo):
    assert mask(topo, "street", 1000.0, [("lobby", 0.0), ("", 999.0)]) == [True, True]


def test_rois_of_an_unnamed_camera_compare_with_everything(topo):
    assert mask(topo, "lobby", 1000.0, [("gate", 0.0), ("park", 1e9)]) == [True, True]


def test_one_roi_against_many_identities(topo):
    last = [("gate", 990.0), ("gate", 900.0), ("street", 999.0), ("park", 995.0), ("lobby", 0.0)]
    assert mask(topo, "street", 1000.0, last) == [True, False, True, False, True]


def test_a_repeated_link_keeps_the_widest_window():
    topo = Topology([("a", "b", 5.0, 10.0), ("a", "b", 2.0, 8.0)])
    assert mask(topo, "b", 100.0, [("a", 97.5), ("a", 90.5), ("a", 98.5)]) == [True, True, False]


@pytest.mark.parametrize("window", [(-1.0, 5.0), (5.0, 4.0)])
def test_bad_windows_are_refused(window):
    with pytest.raises(ValueError, match="window"):
        Topology([("a", "b", *window)])


def test_from_config():
    cfg = TopologyConfig.model_validate({"links": [{"source": "gate", "target": "street", "min_s": 5, "max_s": 30}]})
    assert mask(Topology.from_config(cfg), "street", 10.0, [("gate", 0.0)]) == [True]


def test_config_refuses_a_window_that_ends_before_it_starts():
    with pytest.raises(ValueError, match="less than min_s"):
        TopologyConfig.model_validate({"links": [{"source": "a", "target": "b", "min_s": 5, "max_s": 3}]})

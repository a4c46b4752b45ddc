"""Graceful degradation at the edge: the shed level from broker backlogs, the order sends are shed in, the ROI
policy under a backlog, and the link turning brokers' heartbeats into a shed level."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.edge.link.test_broker_link import Peer, _until, ctx, make_link  # noqa: F401  (fixtures)
from vcascade.core.protocol import wire
from vcascade.core.config import RoiPolicyConfig
from vcascade.core.detections import Detections
from vcascade.edge.selection.degrade import RAISE_AT, SHED_ORDER, shed_level, sheds
from vcascade.edge.selection.roi_policy import RoiPolicy


@pytest.mark.parametrize(
    ("backlogs", "level", "expected"),
    [
        ([], 0, 0), ([100.0], 0, 0), ([200.0], 0, 1), ([450.0, 10.0], 0, 2), ([600.0], 1, 3), ([5000.0], 0, 3),
        ([150.0], 1, 1),  # below 0.2 but above half of it: level 1 is kept (hysteresis)
        ([90.0], 1, 0), ([150.0], 3, 2), ([math.nan, 250.0], 0, 1), ([math.inf], 0, 3),
    ],
)
def test_level_rises_with_the_worst_backlog_and_falls_below_half_its_threshold(backlogs, level, expected):
    assert shed_level(backlogs, ttl_ms=1000.0, level=level) == expected


def test_no_deadline_no_shedding():
    assert shed_level([10_000.0], ttl_ms=0.0, level=2) == 0


def test_refreshes_go_first_better_crops_next_first_sightings_never():
    assert SHED_ORDER == ("refresh", "better", "every_detection") and len(RAISE_AT) == len(SHED_ORDER)
    assert [sheds("refresh", level) for level in range(4)] == [False, True, True, True]
    assert [sheds("better", level) for level in range(4)] == [False, False, True, True]
    assert [sheds("every_detection", level) for level in range(4)] == [False, False, False, True]
    assert not any(sheds("first", level) for level in range(4))


def _frame(track_id: int, size: float, score: float = 0.8) -> Detections:
    return Detections(np.array([[10.0, 10.0, 10.0 + size, 10.0 + size]]), np.array([score]), np.array([0]),
                      np.array([track_id]))  # fmt: skip


def test_policy_sheds_a_better_crop_under_backlog_and_sends_it_once_the_backlog_clears():
    policy = RoiPolicy(RoiPolicyConfig(refresh_s=0), min_size_px=16, padding_px=0)
    assert policy.decide(_frame(7, 40.0), 0.0, (480, 640), shed_level=3).send_reason.tolist() == ["first"]
    shed = policy.decide(_frame(7, 80.0), 40.0, (480, 640), shed_level=2)
    assert len(shed) == 0 and shed.suppress_reason.tolist() == ["backlog"]
    assert policy.decide(_frame(7, 80.0), 80.0, (480, 640), shed_level=1).send_reason.tolist() == ["better"]


def test_policy_sheds_every_detection_sends_at_level_three_only():
    policy = RoiPolicy(RoiPolicyConfig(mode="every_detection"), min_size_px=16, padding_px=0)
    assert policy.decide(_frame(-1, 40.0), 0.0, (480, 640), shed_level=2).send_reason.tolist() == ["every_detection"]
    assert policy.decide(_frame(-1, 40.0), 40.0, (480, 640), shed_level=3).suppress_reason.tolist() == ["backlog"]


class BacklogPeer(Peer):
    """A broker that reports ``backlog_ms`` in its heartbeats."""

    backlog_ms = 0.0

    def pump(self) -> None:
        self._last_beat_s = float("inf")  # the plain heartbeats of Peer are replaced by ours
        super().pump()
        for identity in self.edges:
            self.sock.send_multipart([identity, wire.encode(wire.Heartbeat(sender=self.name,
                                                                           backlog_ms=self.backlog_ms))])


def test_link_raises_the_shed_level_from_heartbeats_and_restores_it_when_the_backlog_clears(make_link):  # noqa: F811
    link, (peer,) = make_link(1, roi={"ttl_ms": 1000.0})
    peer.__class__ = BacklogPeer
    _until(lambda: link.broker_states()["b0"]["up"], [peer])
    assert link.shed_level == 0
    peer.backlog_ms = 700.0
    _until(lambda: link.shed_level == 3, [peer])
    peer.backlog_ms = 0.0
    _until(lambda: link.shed_level == 0, [peer])

"""The ROI policy on hand-made sequences of tracked detections: filters, first send, refresh, better crop, and
the selection it returns (crop rectangles, the size rule applied once)."""


import numpy as np
import pytest

from tests.demo import demo_data
from vcascade.core.config import RoiPolicyConfig
from vcascade.core.detections import Detections
from vcascade.edge.selection.roi_policy import RoiPolicy, SentCrop, is_better
from vcascade.edge.selection.roi_selection import FOLLOWED_REASONS, SENT_REASONS, SUPPRESS_REASONS

PERSON, CAR = 0, 2
FRAME_HW = (480, 640)


def dets(*rows):
    """rows: (x1, y1, x2, y2, score, class_id, track_id)."""
    arr = np.array(rows, np.float64).reshape(-1, 7)
    return Detections(arr[:, :4], arr[:, 4], arr[:, 5].astype(int), arr[:, 6].astype(int))


def verdicts(policy, detections, ts_ms, frame_hw=FRAME_HW):
    """(sent, reason) of each row of ``detections``, in frame order, from the policy's selection.

    The sent and the suppressed rows each keep frame order, so walking the frame's rows against both finds each
    row's verdict; every row must be in exactly one of them.
    """
    selection = policy.decide(detections, ts_ms, frame_hw)
    groups = {
        True: (selection.detections, selection.send_reason),
        False: (selection.suppressed, selection.suppress_reason),
    }
    taken = {True: 0, False: 0}
    got = []
    for i in range(len(detections)):
        send = next(s for s in (True, False) if _same_row(groups[s][0], taken[s], detections, i))
        got.append((send, str(groups[send][1][taken[send]])))
        taken[send] += 1
    assert taken == {True: len(selection), False: len(selection.suppressed)}, "a selected row is not a frame row"
    return got


def _same_row(rows, k, detections, i):
    return k < len(rows) and all(
        np.array_equal(getattr(rows, name)[k], getattr(detections, name)[i])
        for name in ("xyxy", "score", "class_id", "track_id")
    )


def box(track_id, size=40.0, score=0.8, cls=PERSON, x=10.0):
    return (x, 10.0, x + size, 10.0 + size, score, cls, track_id)


def test_track_is_sent_once_then_suppressed_until_refresh():
    policy = RoiPolicy(RoiPolicyConfig(refresh_s=2.0), min_size_px=16, padding_px=0)
    assert verdicts(policy, dets(box(-1)), 0) == [(False, "tentative")]
    assert verdicts(policy, dets(box(5)), 40) == [(True, "first")]
    for ts in range(80, 2040, 40):  # same crop for 2 s of stream time
        assert verdicts(policy, dets(box(5)), ts) == [(False, "sent_recently")]
    assert verdicts(policy, dets(box(5)), 2040) == [(True, "refresh")]  # 2000 ms after the last send
    assert verdicts(policy, dets(box(5)), 2080) == [(False, "sent_recently")]


def test_refresh_zero_never_refreshes():
    policy = RoiPolicy(RoiPolicyConfig(refresh_s=0), min_size_px=16, padding_px=0)
    assert verdicts(policy, dets(box(1)), 0) == [(True, "first")]
    assert verdicts(policy, dets(box(1)), 3_600_000) == [(False, "sent_recently")]


def test_tracks_are_independent():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=0)
    assert verdicts(policy, dets(box(1), box(2, x=100)), 0) == [(True, "first"), (True, "first")]
    assert verdicts(policy, dets(box(1), box(3, x=100)), 40) == [(False, "sent_recently"), (True, "first")]


@pytest.mark.parametrize(
    ("size", "score", "expected"),
    [
        (49.0, 0.8, (True, "better")),  # area 2401 >= 1.5 * 1600, score equal
        (48.0, 0.8, (False, "sent_recently")),  # area 2304 < 2400
        (60.0, 0.7, (False, "sent_recently")),  # much larger but less sure
        (40.0, 0.95, (True, "better")),  # score +0.15, same area
        (40.0, 0.94, (False, "sent_recently")),  # score +0.14 < margin
        (39.0, 0.99, (False, "sent_recently")),  # surer but smaller
    ],
)
def test_better_crop(size, score, expected):
    policy = RoiPolicy(RoiPolicyConfig(better_area_ratio=1.5, better_score_margin=0.15), min_size_px=16, padding_px=0)
    assert verdicts(policy, dets(box(7, size=40.0, score=0.8)), 0) == [(True, "first")]
    assert verdicts(policy, dets(box(7, size=size, score=score)), 40) == [expected]


def test_better_is_measured_against_the_last_sent_crop():
    policy = RoiPolicy(RoiPolicyConfig(better_area_ratio=2.0), min_size_px=16, padding_px=0)
    verdicts(policy, dets(box(1, size=20.0)), 0)  # area 400 sent
    assert verdicts(policy, dets(box(1, size=25.0)), 40) == [(False, "sent_recently")]  # 625, not remembered
    assert verdicts(policy, dets(box(1, size=29.0)), 80) == [(True, "better")]  # 841 >= 800
    assert verdicts(policy, dets(box(1, size=40.0)), 120) == [(False, "sent_recently")]  # 1600 < 2 * 841
    assert verdicts(policy, dets(box(1, size=41.0)), 160) == [(False, "sent_recently")]  # 1681 < 1682
    assert verdicts(policy, dets(box(1, size=42.0)), 200) == [(True, "better")]  # 1764 >= 1682


def test_is_better_needs_the_other_measure_not_worse():
    last = SentCrop(0.0, 1000.0, 0.5)
    assert is_better(SentCrop(1.0, 1500.0, 0.5), last, 1.5, 0.1)
    assert not is_better(SentCrop(1.0, 1500.0, 0.49), last, 1.5, 0.1)
    assert is_better(SentCrop(1.0, 1000.0, 0.6), last, 1.5, 0.1)
    assert not is_better(SentCrop(1.0, 999.0, 0.9), last, 1.5, 0.1)


def test_filters_come_first_and_are_not_followed():
    cfg = RoiPolicyConfig(classes=["car"], min_score=0.5, max_size_px=100)
    policy = RoiPolicy(cfg, min_size_px=16, padding_px=0)
    frame = dets(
        box(1, cls=PERSON),  # class
        box(2, cls=CAR, size=10.0),  # narrower than 16
        box(3, cls=CAR, size=120.0),  # wider than 100
        box(4, cls=CAR, score=0.4),  # score
        box(5, cls=CAR),  # passes
        box(-1, cls=CAR, x=300.0),  # passes filters, no confirmed track
    )
    got = verdicts(policy, frame, 0)
    assert got == [
        (False, "class"), (False, "size"), (False, "size"), (False, "score"), (True, "first"), (False, "tentative"),
    ]
    assert {r for _, r in got if r in FOLLOWED_REASONS} == {"tentative"}
    assert policy.tracks_remembered == 1  # filtered tracks leave no state


def test_size_filter_uses_width_and_height():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=0)
    thin = (0.0, 0.0, 15.0, 200.0, 0.9, PERSON, 1)
    flat = (0.0, 0.0, 200.0, 15.9, 0.9, PERSON, 2)
    ok = (0.0, 0.0, 16.0, 16.0, 0.9, PERSON, 3)
    assert verdicts(policy, dets(thin, flat, ok), 0) == [(False, "size"), (False, "size"), (True, "first")]


def test_selection_holds_the_sent_rows_with_their_crop_rectangles():
    """The size rule is the policy's alone: the narrow row is suppressed here and the others get their padded
    rectangles clamped to the frame, which the crop step takes as they are."""
    policy = RoiPolicy(RoiPolicyConfig(mode="every_detection"), min_size_px=16, padding_px=2)
    frame = Detections(np.array([[10, 10, 60, 90], [100, 10, 105, 90], [150, 50, 199, 99]], np.float32),
                       np.array([0.9, 0.8, 0.7]), np.array([0, 1, 2]))
    selection = policy.decide(frame, 0, (100, 200))
    assert selection.detections.class_id.tolist() == [0, 2]
    assert selection.crop_xyxy.tolist() == [[8, 8, 62, 92], [148, 48, 200, 100]]  # the second clamped at 200 x 100
    assert selection.send_reason.tolist() == ["every_detection"] * 2 and selection.recognizer.tolist() == ["", ""]
    assert selection.suppressed.class_id.tolist() == [1] and selection.suppress_reason.tolist() == ["size"]


def test_a_box_wholly_outside_the_frame_is_suppressed_as_size_and_leaves_no_state():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=4)
    frame = dets(box(1, x=700.0), box(2, x=630.0))  # 640 px wide: none of track 1 in view, 10 px of track 2
    assert verdicts(policy, frame, 0) == [(False, "size"), (True, "first")]
    assert policy.tracks_remembered == 1


def test_every_detection_sends_all_that_pass_filters():
    policy = RoiPolicy(RoiPolicyConfig(mode="every_detection", min_score=0.5), min_size_px=16, padding_px=0)
    for ts in (0, 40, 80):
        got = verdicts(policy, dets(box(1), box(-1, x=100), box(2, score=0.3)), ts)
        assert got == [(True, "every_detection"), (True, "every_detection"), (False, "score")]
    assert policy.tracks_remembered == 0


def test_retain_forgets_expired_tracks():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=0)
    verdicts(policy, dets(box(1), box(2, x=100)), 0)
    assert policy.tracks_remembered == 2
    policy.retain({2})
    assert policy.tracks_remembered == 1
    assert verdicts(policy, dets(box(1), box(2, x=100)), 40) == [(True, "first"), (False, "sent_recently")]


def test_empty_frame_and_reason_sets():
    policy = RoiPolicy(RoiPolicyConfig(), min_size_px=16, padding_px=0)
    selection = policy.decide(Detections.empty(), 0, FRAME_HW)
    assert len(selection) == 0 and len(selection.suppressed) == 0 and selection.crop_xyxy.shape == (0, 4)
    assert not set(SENT_REASONS) & set(SUPPRESS_REASONS) and FOLLOWED_REASONS <= set(SUPPRESS_REASONS)


def test_config_rejects_policies_that_would_resend_every_frame():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RoiPolicyConfig(better_area_ratio=1.0)
    with pytest.raises(ValidationError):
        RoiPolicyConfig(better_score_margin=0.0)


def test_camera_overrides_its_edges_policy_and_classes_are_checked(tmp_path):
    import yaml

    from vcascade.core.config import ConfigError, load_config

    data = demo_data()
    data["cameras"]["street-2"]["roi_policy"] = {"mode": "every_detection"}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)
    assert dep.roi_policy_of("street-1").mode == "track" and dep.roi_policy_of("street-2").mode == "every_detection"
    data["edges"]["edge-1"]["roi"]["policy"]["classes"] = ["person", "unicorn"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"edges.edge-1.roi.policy.classes\[1\] = 'unicorn'"):
        load_config(path)

"""The selection type's checks on construction (types, dtypes, shapes, lengths, values), its views, crop geometry."""

import numpy as np
import pytest

from vcascade.core.detections import Detections
from vcascade.edge.selection.roi_selection import FOLLOWED_REASONS, SUPPRESS_REASONS, RoiSelection, crop_boxes


def dets(n: int) -> Detections:
    """n detections, 20 px boxes side by side, track ids 0..n-1."""
    xyxy = np.array([[20.0 * i, 0.0, 20.0 * i + 20.0, 20.0] for i in range(n)]).reshape(-1, 4)
    return Detections(xyxy, np.full(n, 0.9), np.zeros(n, int), np.arange(n))


def valid(**change):
    """Arguments of a valid selection (2 sent, 3 suppressed) with ``change`` applied."""
    args = {
        "detections": dets(2), "send_reason": ["first", "better"], "recognizer": ["", "embedder"],
        "crop_xyxy": np.array([[0, 0, 20, 20], [20, 0, 40, 20]], np.int64),
        "suppressed": dets(3), "suppress_reason": ["tentative", "size", "sent_recently"],
    }
    return {**args, **change}


def test_a_valid_selection_is_stored_as_typed_arrays():
    selection = RoiSelection(**valid())
    assert len(selection) == 2
    assert selection.send_reason.dtype.kind == selection.recognizer.dtype.kind == "U"
    assert selection.crop_xyxy.dtype == np.int32 and selection.crop_xyxy.shape == (2, 4)
    assert selection.suppress_reason.tolist() == ["tentative", "size", "sent_recently"]


def test_an_empty_selection_takes_empty_sequences():
    selection = RoiSelection(Detections.empty(), [], [], [], Detections.empty(), [])
    assert len(selection) == 0 and selection.crop_xyxy.shape == (0, 4) and selection.suppressed_counts() == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"send_reason": ["first"]}, r"send_reason must have shape \(2,\)"),
        ({"recognizer": ["", "a", "b"]}, r"recognizer must have shape \(2,\)"),
        ({"crop_xyxy": np.zeros((3, 4), np.int32)}, r"crop_xyxy must have shape \(2, 4\)"),
        ({"crop_xyxy": np.zeros((2, 2), np.int32)}, r"crop_xyxy must have shape \(2, 4\)"),
        ({"suppress_reason": ["size"]}, r"suppress_reason must have shape \(3,\)"),
        ({"send_reason": [["first", "better"]]}, r"send_reason must have shape \(2,\)"),
    ],
)
def test_wrong_lengths_and_shapes_raise_value_error(change, message):
    with pytest.raises(ValueError, match=message):
        RoiSelection(**valid(**change))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"crop_xyxy": np.array([[0.0, 0.0, 20.0, 20.0], [20.0, 0.0, 40.0, 20.0]])}, "crop_xyxy must hold integers"),
        ({"send_reason": np.array([1, 2])}, "send_reason must hold str"),
        ({"recognizer": np.array(["", None], dtype=object)}, "recognizer must hold str"),
        ({"suppress_reason": np.array([0.5, 0.5, 0.5])}, "suppress_reason must hold str"),
        ({"detections": dets(2).xyxy}, "detections must be Detections"),
        ({"suppressed": None}, "suppressed must be Detections"),
    ],
)
def test_wrong_dtypes_and_types_raise_type_error(change, message):
    with pytest.raises(TypeError, match=message):
        RoiSelection(**valid(**change))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"send_reason": ["first", "tentative"]}, r"send_reason has \['tentative'\]"),
        ({"suppress_reason": ["tentative", "first", "size"]}, r"suppress_reason has \['first'\]"),
        ({"crop_xyxy": np.array([[0, 0, 20, 20], [20, 0, 20, 20]])}, "0 <= x1 < x2"),  # empty: nothing to crop
        ({"crop_xyxy": np.array([[0, -1, 20, 20], [20, 0, 40, 20]])}, "0 <= x1 < x2"),  # starts before the frame
    ],
)
def test_reasons_out_of_their_set_and_empty_crops_raise_value_error(change, message):
    with pytest.raises(ValueError, match=message):
        RoiSelection(**valid(**change))


def test_suppressed_counts_per_reason_and_followed_rows_in_frame_order():
    reasons = ["tentative", "size", "sent_recently", "size"]
    selection = RoiSelection(**valid(suppressed=dets(4), suppress_reason=reasons))
    assert selection.suppressed_counts() == {"tentative": 1, "size": 2, "sent_recently": 1}
    followed = selection.followed()
    assert followed.track_id.tolist() == [0, 2]  # the size-filtered rows are not objects of interest
    assert FOLLOWED_REASONS <= set(SUPPRESS_REASONS)


def test_crop_boxes_pad_and_clamp():
    assert crop_boxes(np.array([[10.2, 20.7, 50.5, 60.0]]), (100, 200), 4).tolist() == [[6, 16, 55, 64]]
    assert crop_boxes(np.array([[-5.0, 2.0, 198.0, 99.0]]), (100, 200), 8).tolist() == [[0, 0, 200, 100]]


def test_crop_boxes_of_a_box_outside_the_frame_are_empty_and_of_no_box_are_none():
    outside = crop_boxes(np.array([[210.0, 10.0, 240.0, 40.0]], np.float32), (100, 200), 4)
    assert outside.tolist() == [[200, 6, 200, 44]]
    assert crop_boxes(Detections.empty().xyxy, (100, 200), 4).shape == (0, 4)

"""Wire protocol: round trips, and rejection of malformed, pickled and foreign-version headers and head outputs."""

import pickle

import msgspec
import pytest

from vcascade.core.protocol import wire


def _roi(**overrides):
    fields = dict(
        roi_id="edge-1-abc-1", camera="street-1", frame_seq=7, stream_ts_ms=280.0, capture_unix_ms=1.7e12,
        xyxy=(10.5, 20.0, 110.25, 220.0), crop_xyxy=(6, 16, 115, 224), class_id=0, score=0.91,
    )
    return wire.Roi(**{**fields, **overrides})


@pytest.mark.parametrize(
    "header",
    [
        _roi(),
        _roi(ttl_ms=150.0, attempt=2),
        _roi(send_reason="refresh"),
        wire.Result(
            roi_id="r", worker="w", output=wire.EmbeddingOutput(3, 0.93, False),
            hops=[("batch_wait", 1.5), ("stage0", 4.0)],
        ),
        wire.Result(roi_id="r", worker="w", output=wire.ClassifierOutput(("car", "bus"), (0.75, 0.25))),
        wire.Result(roi_id="r", worker="w", output=wire.TextOutput("AB 12", 0.97)),
        wire.Result(roi_id="r", worker="w"),
        wire.Drop(roi_id="r", reason="stale", where="broker-1"),
        wire.Ready(worker="w", credits=64, recognizer="embedder"),
        wire.Heartbeat(sender="b"),
        wire.Bye(sender="w"),
    ],
)
def test_round_trip(header):
    assert wire.decode(wire.encode(header)) == header


def test_header_is_msgpack_with_kind_and_version():
    raw = msgspec.msgpack.decode(wire.encode(_roi()))
    assert raw["kind"] == "roi" and raw["v"] == wire.PROTOCOL_VERSION


def test_a_result_carries_its_head_output_tagged_by_head_kind():
    raw = msgspec.msgpack.decode(wire.encode(wire.Result(roi_id="r", worker="w", output=wire.TextOutput("K", 0.6))))
    assert raw["output"] == {"head": "text", "text": "K", "text_score": 0.6, "texts": []}
    assert [t.__struct_config__.tag for t in wire.HEAD_OUTPUTS] == ["embedding", "classifier", "text"]


def test_a_text_result_carries_every_region_read_with_its_box():
    regions = (wire.TextRegion("KA 12", 0.97, (3.0, 40.0, 61.5, 52.0), 0.8), wire.TextRegion("", 0.2, (0, 0, 9, 4), 0.6))
    result = wire.Result(roi_id="r", worker="w", output=wire.TextOutput("KA 12", 0.97, regions))
    assert wire.decode(wire.encode(result)) == result
    raw = msgspec.msgpack.decode(wire.encode(result))
    assert raw["output"]["texts"][0] == {"text": "KA 12", "text_score": 0.97, "box": [3.0, 40.0, 61.5, 52.0],
                                         "detection_score": 0.8}
    bad = {**raw, "output": {**raw["output"], "texts": [{"text": "K", "text_score": 0.9, "box": [1, 2]}]}}
    with pytest.raises(wire.MalformedMessage):
        wire.decode(msgspec.msgpack.encode(bad))  # a region without its four box values is refused


def test_send_reason_is_checked_against_its_closed_set_and_defaults_to_unsaid():
    raw = msgspec.msgpack.decode(wire.encode(_roi()))
    assert wire.decode(msgspec.msgpack.encode({k: v for k, v in raw.items() if k != "send_reason"})).send_reason == ""
    with pytest.raises(wire.MalformedMessage) as info:
        wire.decode(msgspec.msgpack.encode({**raw, "send_reason": "vip"}))
    assert info.value.reason == "bad_fields"
    assert wire.DEFERRABLE_SEND_REASONS < set(wire.SendReason.__args__)


def _reason(frame: bytes) -> str:
    with pytest.raises(wire.MalformedMessage) as info:
        wire.decode(frame)
    return info.value.reason


def test_pickled_frame_is_rejected_without_unpickling():
    class Boom:
        def __reduce__(self):  # would run on unpickling
            return (pytest.fail, ("the wire unpickled a frame",))

    assert _reason(pickle.dumps(Boom())) == "pickle"
    assert _reason(pickle.dumps({"kind": "roi"})) == "pickle"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "empty"),
        (b"\xc1garbage", "not_msgpack"),
        (msgspec.msgpack.encode({"kind": "roi", "v": wire.PROTOCOL_VERSION}), "bad_fields"),
        (msgspec.msgpack.encode({"kind": "teleport", "v": wire.PROTOCOL_VERSION}), "bad_fields"),
        (msgspec.msgpack.encode(
            {"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": "w", "credits": "many", "recognizer": "r"},
        ), "bad_fields"),
        (msgspec.msgpack.encode({"kind": "ready", "v": 99, "worker": "w", "credits": 1}), "version"),
        (msgspec.msgpack.encode([1, 2, 3]), "bad_fields"),
        (b"\x91" + b"\x00" * (wire.MAX_HEADER_BYTES + 1), "too_large"),
    ],
)
def test_malformed_headers_are_rejected_with_a_reason(frame, reason):
    assert _reason(frame) == reason


def _result(output, **fields) -> bytes:
    """A result header as a hostile or foreign peer might write it: ``output`` and ``fields`` as given."""
    return msgspec.msgpack.encode(
        {"kind": "result", "v": wire.PROTOCOL_VERSION, "roi_id": "r", "worker": "w", "output": output, **fields}
    )


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (_result({"head": "segmenter", "mask": [1, 0]}), "bad_fields"),  # unknown head kind
        (_result({"identity_id": 3, "similarity": 0.9, "enrolled": False}), "bad_fields"),  # no tag
        (_result({"head": None, "text": "K", "text_score": 0.5}), "bad_fields"),
        (_result({"head": 7, "text": "K", "text_score": 0.5}), "bad_fields"),
        (_result({"head": "embedding", "identity_id": "7", "similarity": 0.9, "enrolled": False}), "bad_fields"),
        (_result({"head": "embedding", "identity_id": 7, "similarity": 0.9}), "bad_fields"),  # missing field
        (_result({"head": "text", "text": b"K", "text_score": 0.5}), "bad_fields"),
        (_result({"head": "text", "text": "K", "text_score": "high"}), "bad_fields"),
        (_result({"head": "classifier", "labels": ["car", "bus"], "label_scores": [0.9]}), "bad_fields"),
        (_result({"head": "classifier", "labels": "car", "label_scores": [0.9]}), "bad_fields"),
        (_result({"head": "classifier", "labels": [1], "label_scores": [0.9]}), "bad_fields"),
        (_result([["embedding", 3, 0.9, False]]), "bad_fields"),  # an array, not a tagged map
        (_result("text"), "bad_fields"),
        (_result({"head": "text", "text": {"nested": "K"}, "text_score": 0.5}), "bad_fields"),
        (msgspec.msgpack.encode(
            {"kind": "result", "v": 1, "roi_id": "r", "worker": "w", "identity_id": 3, "head": "embedding"},
        ), "version"),  # a worker of protocol 1 (every head's fields side by side)
        (msgspec.msgpack.encode({"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": "w", "credits": 1}),
         "bad_fields"),  # a worker naming no recognizer
        (msgspec.msgpack.encode(
            {"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": "w", "credits": 1, "recognizer": ""},
        ), "bad_fields"),
    ],
)
def test_hostile_head_outputs_are_malformed_not_crashes(frame, reason):
    assert _reason(frame) == reason


def test_a_valid_output_in_the_same_frame_decodes():
    """The control for the hostile cases above: only their ``output`` makes them malformed."""
    result = wire.decode(_result({"head": "text", "text": "K", "text_score": 0.5}))
    assert result == wire.Result(roi_id="r", worker="w", output=wire.TextOutput("K", 0.5))


def test_classifier_output_labels_and_scores_pair_up():
    with pytest.raises(ValueError, match="2 labels but 1 label_scores"):
        wire.ClassifierOutput(("car", "bus"), (0.9,))


def test_split_message_checks_payload_count():
    routing, header, payload = wire.split_message([b"edge-id", wire.encode(_roi()), b"jpeg"], 1)
    assert routing == [b"edge-id"] and header.camera == "street-1" and payload == [b"jpeg"]
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([b"edge-id", wire.encode(_roi())], 1)  # ROI without its crop
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([wire.encode(wire.Bye(sender="w")), b"extra"], 0)
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([b"edge-id"], 1)


def test_embedding_output_carries_provisional_and_merged_ids_and_reads_a_peer_without_them():
    full = wire.Result(roi_id="r", worker="w", output=wire.EmbeddingOutput(4, 0.9, False, True, (9, -2)))
    assert wire.decode(wire.encode(full)) == full
    older = msgspec.msgpack.encode({"v": wire.PROTOCOL_VERSION, "kind": "result", "roi_id": "r", "worker": "w",
                                    "output": {"head": "embedding", "identity_id": 4, "similarity": 0.9,
                                               "enrolled": False}})  # fmt: skip
    decoded = wire.decode(older).output
    assert decoded.provisional is False and decoded.merged_from == ()
    bad = msgspec.msgpack.encode({"v": wire.PROTOCOL_VERSION, "kind": "result", "roi_id": "r", "worker": "w",
                                  "output": {"head": "embedding", "identity_id": 4, "similarity": 0.9,
                                             "enrolled": False, "merged_from": ["x"]}})  # fmt: skip
    with pytest.raises(wire.MalformedMessage):
        wire.decode(bad)


def test_head_outputs_answer_the_way_backs_questions_through_their_accessors_after_decoding():
    """The edge's consumers read an answer through these accessors, never by a head's field names."""
    def decoded(output):
        return wire.decode(wire.encode(wire.Result(roi_id="r", worker="w", output=output))).output

    embedding, provisional = decoded(wire.EmbeddingOutput(7, 0.9, False)), decoded(wire.EmbeddingOutput(-3, 1.0, True, True))
    assert (embedding.gallery_identity(), embedding.read_text(), embedding.short_label()) == (7, None, "id 7")
    assert (provisional.gallery_identity(), provisional.short_label()) == (None, None)
    text, nothing = decoded(wire.TextOutput("KA 12", 0.9)), decoded(wire.TextOutput("", 0.0))
    assert (text.gallery_identity(), text.read_text(), text.short_label()) == (None, "KA 12", "KA 12")
    assert (nothing.read_text(), nothing.short_label()) == ("", None)
    labels = decoded(wire.ClassifierOutput(("car", "bus"), (0.6, 0.2)))
    assert (labels.gallery_identity(), labels.read_text(), labels.short_label()) == (None, None, "car")


@pytest.mark.parametrize("name", ["", "-lead", "has space", "new\nline", "trailing\n", "é", "x" * 64, "a/b"])
@pytest.mark.parametrize(
    "header",
    [
        {**msgspec.to_builtins(_roi()), "camera": None},
        {**msgspec.to_builtins(_roi()), "recognizer": None},
        {"kind": "result", "v": wire.PROTOCOL_VERSION, "roi_id": "r", "worker": None},
        {"kind": "drop", "v": wire.PROTOCOL_VERSION, "roi_id": "r", "reason": "stale", "where": None},
        {"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": None, "credits": 1, "recognizer": "embed"},
        {"kind": "ready", "v": wire.PROTOCOL_VERSION, "worker": "w", "credits": 1, "recognizer": None},
    ],
)
def test_every_peer_name_is_checked_on_decoding(header, name):
    """A peer's names become metric labels and log fields: each is a config name, whether seen before or not.
    (An ROI's recognizer may also be empty: any worker.)"""
    field = next(key for key, value in header.items() if value is None)
    if field == "recognizer" and header["kind"] == "roi" and name == "":
        return
    frame = msgspec.msgpack.encode({**header, field: name})
    assert _reason(frame) == "bad_fields"
    assert _reason(frame) == "bad_fields"  # the second time too
    good = msgspec.msgpack.encode({**header, field: "cam-2.x_Y"})
    assert getattr(wire.decode(good), field) == "cam-2.x_Y"
    assert getattr(wire.decode(good), field) == "cam-2.x_Y"  # remembered as checked


def test_names_are_checked_when_a_header_is_built_too():
    with pytest.raises(ValueError, match="not a name"):
        _roi(camera="street 1")
    with pytest.raises(ValueError, match="not a name"):
        wire.Ready(worker="w", credits=1, recognizer="embed\n")

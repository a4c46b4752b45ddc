"""Wire protocol: round trips, and rejection of malformed, pickled and foreign-version headers."""

import pickle

import msgspec
import pytest

from vcascade.core import wire


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
        wire.Result(roi_id="r", worker="w", identity_id=3, similarity=0.93, hops=[("batch_wait", 1.5), ("stage0", 4.0)]),
        wire.Drop(roi_id="r", reason="stale", where="broker-1"),
        wire.Ready(worker="w", credits=64),
        wire.Heartbeat(sender="b"),
        wire.Bye(sender="w"),
    ],
)
def test_round_trip(header):
    assert wire.decode(wire.encode(header)) == header


def test_header_is_msgpack_with_kind_and_version():
    raw = msgspec.msgpack.decode(wire.encode(_roi()))
    assert raw["kind"] == "roi" and raw["v"] == wire.PROTOCOL_VERSION


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
        (msgspec.msgpack.encode({"kind": "roi", "v": 1}), "bad_fields"),
        (msgspec.msgpack.encode({"kind": "teleport", "v": 1}), "bad_fields"),
        (msgspec.msgpack.encode({"kind": "ready", "v": 1, "worker": "w", "credits": "many"}), "bad_fields"),
        (msgspec.msgpack.encode({"kind": "ready", "v": 99, "worker": "w", "credits": 1}), "version"),
        (msgspec.msgpack.encode([1, 2, 3]), "bad_fields"),
        (b"\x91" + b"\x00" * (wire.MAX_HEADER_BYTES + 1), "too_large"),
    ],
)
def test_malformed_headers_are_rejected_with_a_reason(frame, reason):
    assert _reason(frame) == reason


def test_split_message_checks_payload_count():
    routing, header, payload = wire.split_message([b"edge-id", wire.encode(_roi()), b"jpeg"], 1)
    assert routing == [b"edge-id"] and header.camera == "street-1" and payload == [b"jpeg"]
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([b"edge-id", wire.encode(_roi())], 1)  # ROI without its crop
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([wire.encode(wire.Bye(sender="w")), b"extra"], 0)
    with pytest.raises(wire.MalformedMessage, match="frames"):
        wire.split_message([b"edge-id"], 1)

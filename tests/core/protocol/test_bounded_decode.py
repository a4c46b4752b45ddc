"""Bounded decoding of peer input (issue 17, cases 1, 5 and 7): the depth and length walk, and properties of
every core decoder of a socket's bytes: any input gives a valid message or ``MalformedMessage``, never another
exception."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import deep_array, deep_header, hostile_frames, map_with, maps_over
from vcascade.core.protocol import control
from vcascade.core.protocol import wire
from vcascade.core.protocol.bounded_decode import MAX_DEPTH, REASONS, MalformedMessage, check_bounds

FUZZ = settings(max_examples=400, deadline=None, database=None)
"""Each property runs in a few seconds; no example database is written into the checkout."""


def _reason(call, *args) -> str:
    with pytest.raises(MalformedMessage) as info:
        call(*args)
    return info.value.reason


# ---------------------------------------------------------------- the walk


OPENERS = [b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\xdd\x00\x00\x00\x01", b"\xde\x00\x01\xa1k"]
"""One level of nesting each: fixarray, fixmap, array16, array32, map16 (one item or pair)."""


@pytest.mark.parametrize("opener", OPENERS)
def test_nesting_up_to_the_limit_passes_and_one_more_level_is_too_deep(opener):
    check_bounds(opener * MAX_DEPTH + b"\xc0")
    assert _reason(check_bounds, opener * (MAX_DEPTH + 1) + b"\xc0") == "too_deep"


def test_many_flat_containers_are_walked_and_pass():
    flat = msgspec.msgpack.encode([[i] for i in range(3 * MAX_DEPTH)])  # many container bytes, depth 2
    check_bounds(flat)
    assert msgspec.msgpack.decode(flat)[-1] == [3 * MAX_DEPTH - 1]


_HEARTBEAT = {"kind": "heartbeat", "v": wire.PROTOCOL_VERSION, "sender": "b"}
_PADDING = {f"e{i}": [] for i in range(MAX_DEPTH)}
"""Empty arrays: enough container bytes that the header is walked rather than passed by the fast path."""


@pytest.mark.parametrize(
    "hostile",
    [
        b"\xdd\xff\xff\xff\xff\x00",  # an array declaring 2**32 - 1 items in 1 byte
        b"\xdf\x7f\xff\xff\xff",  # a map declaring 2**31 - 1 pairs
        b"\xdb\xff\xff\xff\xff",  # a str declaring 4 GiB
        b"\xc6\x00\x01\x00\x00ab",  # bin of 64 KiB holding 2 bytes
        b"\xc1",  # the one byte msgpack never uses
    ],
)
def test_declared_lengths_beyond_the_bytes_left_are_not_msgpack_walked_or_not(hostile):
    assert _reason(wire.decode, map_with(_HEARTBEAT, {"x": hostile})) == "not_msgpack"  # msgspec refuses it
    assert _reason(check_bounds, map_with({**_HEARTBEAT, **_PADDING}, {"x": hostile})) == "not_msgpack"  # walked


# ---------------------------------------------------------------- wire protocol


def test_a_deeply_nested_header_is_too_deep_not_a_recursion_error():
    """Issue 17 case 1: 5 KB nested 5000 levels deep raised RecursionError from the version probe."""
    frame = deep_header({"kind": "heartbeat", "v": wire.PROTOCOL_VERSION, "sender": "b"})
    assert 5000 < len(frame) < wire.MAX_HEADER_BYTES
    assert _reason(wire.decode, frame) == "too_deep"
    assert _reason(wire.decode, deep_array()) == "too_deep"


def _drop(**fields) -> bytes:
    return msgspec.msgpack.encode({"kind": "drop", "v": wire.PROTOCOL_VERSION, "roi_id": "r", "where": "w1", **fields})


def test_a_made_up_drop_reason_is_malformed_not_a_new_label_value():
    """Issue 17 case 5: a worker's invented drop reasons became Prometheus labels and results.jsonl values."""
    for reason in wire.DROP_REASONS:
        assert wire.decode(_drop(reason=reason)).reason == reason
    for made_up in ("totally_new", "stale\n", "", "x" * 10_000, 7):
        assert _reason(wire.decode, _drop(reason=made_up)) == "bad_fields"


def test_peer_strings_that_become_labels_or_line_values_are_checked():
    assert _reason(wire.decode, _drop(reason="stale", where="w1 {evil}")) == "bad_fields"
    result = {"kind": "result", "v": wire.PROTOCOL_VERSION, "roi_id": "r", "worker": "w1"}
    assert wire.decode(msgspec.msgpack.encode({**result, "hops": [["stage12", 1.0], ["link", 2.0]]})).hops == [
        ("stage12", 1.0), ("link", 2.0)]  # fmt: skip
    for hops in ([["made_up_hop", 1.0]], [["stage", 1.0]]):
        assert _reason(wire.decode, msgspec.msgpack.encode({**result, "hops": hops})) == "bad_fields"
    assert _reason(wire.decode, msgspec.msgpack.encode({**result, "worker": "../w"})) == "bad_fields"


_WIRE_FIELDS = sorted({f for t in (wire.Roi, wire.Result, wire.Drop, wire.Ready, wire.Heartbeat, wire.Bye)
                       for f in t.__struct_fields__} | {"kind"})  # fmt: skip
_wire_maps = maps_over(_WIRE_FIELDS, {
    "kind": st.sampled_from(["roi", "result", "drop", "ready", "heartbeat", "bye"]) | st.text(max_size=5),
    "v": st.just(wire.PROTOCOL_VERSION) | st.integers(-(2**63), 2**64 - 1),
})  # fmt: skip


@FUZZ
@given(hostile_frames(_wire_maps))
def test_wire_decode_gives_a_message_or_malformed_for_any_bytes(frame):
    try:
        header = wire.decode(frame)
    except MalformedMessage as exc:
        assert exc.reason in REASONS
        return
    assert isinstance(header, (wire.Roi, wire.Result, wire.Drop, wire.Ready, wire.Heartbeat, wire.Bye))
    assert header.v == wire.PROTOCOL_VERSION
    assert not isinstance(header, wire.Drop) or header.reason in wire.DROP_REASONS


# ---------------------------------------------------------------- control protocol


def test_a_control_request_of_another_version_is_refused_as_version():
    """Issue 17 case 7: 50 ``camera_list`` requests with v=999 were answered."""
    assert _reason(control.decode_request, control.encode(control.CameraList(v=999))) == "version"
    assert _reason(control.decode_request, msgspec.msgpack.encode({"op": "camera_list"})) == "bad_fields"  # no v
    assert control.decode_request(control.encode(control.CameraList())) == control.CameraList()


def test_a_deeply_nested_control_request_is_too_deep():
    frame = deep_header({"op": "camera_list", "v": control.PROTOCOL_VERSION})
    assert _reason(control.decode_request, frame) == "too_deep"
    camera = map_with({"url": "x.mp4"}, {"x": deep_array(50)})
    add = map_with({"op": "camera_add", "v": control.PROTOCOL_VERSION, "name": "c"}, {"camera": camera})
    assert _reason(control.decode_request, add) == "too_deep"


_control_maps = maps_over(["op", "name", "camera", "v", "ok", "error", "cameras"], {
    "op": st.sampled_from(["camera_add", "camera_remove", "camera_list"]) | st.text(max_size=5),
    "v": st.just(control.PROTOCOL_VERSION) | st.integers(-(2**63), 2**64 - 1),
})  # fmt: skip


@FUZZ
@given(hostile_frames(_control_maps))
def test_control_decoders_give_a_message_or_malformed_for_any_bytes(frame):
    for decode, types in ((control.decode_request, (control.CameraAdd, control.CameraRemove, control.CameraList)),
                          (control.decode_reply, (control.Reply,))):  # fmt: skip
        try:
            message = decode(frame)
        except MalformedMessage as exc:
            assert exc.reason in REASONS
            continue
        assert isinstance(message, types) and message.v == control.PROTOCOL_VERSION

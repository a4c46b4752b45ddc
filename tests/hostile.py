"""What a hostile or broken peer sends, as hypothesis strategies and as the messages that once broke a process.

Shared by the decoder property tests (tests/core/protocol/test_bounded_decode.py, tests/center/stages/test_link_hostile.py)
and the regression tests against live sockets.
"""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st

DEEP_LEVELS = 5000
"""Nesting of the message that killed a broker, a stage group and an edge's control socket (issue 17, case 1):
``RecursionError`` out of msgspec from about a thousand levels on."""


def deep_array(levels: int = DEEP_LEVELS) -> bytes:
    """msgpack of ``levels`` nested one-element arrays around nil (``[[[...None...]]]``), built as bytes: encoding
    it with msgspec would itself recurse."""
    return b"\x91" * levels + b"\xc0"


def map_with(fields: dict, raw: dict[str, bytes]) -> bytes:
    """msgpack of a map holding ``raw`` (values given as msgpack bytes), then ``fields`` (encoded normally)."""
    count = len(fields) + len(raw)
    head = bytes([0x80 | count]) if count < 16 else b"\xde" + count.to_bytes(2, "big")
    items = [*raw.items(), *((k, msgspec.msgpack.encode(v)) for k, v in fields.items())]
    return head + b"".join(msgspec.msgpack.encode(k) + v for k, v in items)


def deep_header(fields: dict, levels: int = DEEP_LEVELS) -> bytes:
    """A header map whose first key ``x`` (unknown) is nested ``levels`` deep (about 5 KB), then valid-looking
    ``fields``: every decoder skips an unknown key recursively (the version probe first; a tagged union while it
    looks for its tag), so this is the message that took a broker, a stage group and a control socket down."""
    return map_with(fields, {"x": deep_array(levels)})


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=30,
)
"""Any msgpack-able value: nested lists and maps of nil, bools, huge ints, NaN/inf, text, bytes."""


def maps_over(field_names: list[str], fixed: dict | None = None) -> st.SearchStrategy[dict]:
    """Maps whose keys are mostly the expected field names (so decoding gets past the first check) with any
    values; ``fixed`` keys (``kind``, ``v``) are drawn from their own strategies."""
    keys = st.sampled_from(field_names) | st.text(max_size=6)
    base = st.dictionaries(keys, values, max_size=len(field_names) + 2)
    if not fixed:
        return base
    return st.tuples(base, st.fixed_dictionaries(fixed)).map(lambda pair: {**pair[0], **pair[1]})


@st.composite
def nested(draw, max_levels: int = 3000) -> bytes:
    """A header-like map with one value nested 1..``max_levels`` deep in arrays or maps."""
    levels = draw(st.integers(min_value=1, max_value=max_levels))
    opener = draw(st.sampled_from([b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\xdf\x00\x00\x00\x01\xa1k"]))
    return map_with({"v": draw(st.integers(0, 3))}, {"x": opener * levels + b"\xc0"})


def hostile_frames(structures: st.SearchStrategy[dict]) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, msgpack of ``structures`` (valid-looking maps with wrong values), and deep nesting."""
    return st.binary(max_size=200) | structures.map(msgspec.msgpack.encode) | nested()

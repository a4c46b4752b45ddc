"""Bounded decoding of what peers send: one gate in front of every msgspec decoder of a socket's bytes.

A hostile or broken peer can send any bytes. Before msgspec sees them, :func:`decode_versioned` checks what
decoding would cost, without recursing and without allocating more than the bytes themselves:

* size: at most ``max_bytes`` (:data:`MAX_HEADER_BYTES` by default) -> ``too_large``; an empty frame ->
  ``empty``; pickle bytes are named, never loaded -> ``pickle``;
* nesting: arrays and maps at most :data:`MAX_DEPTH` deep -> ``too_deep`` (msgspec decodes recursively, and a
  5 KB message nested a few thousand levels deep raised ``RecursionError`` out of the decoder and killed a
  broker);
* element counts: no declared array, map, string or binary length makes a decoder allocate beyond the frame's
  size: msgspec reads strings in place after checking the bytes are there and grows containers item by item
  (it preallocates 16 entries at most, by design); where the walk below runs, a declared length beyond the
  bytes left is refused outright -> ``not_msgpack``;
* version: the ``v`` field is read first, alone, since another version may have other fields -> ``version``;
* then the typed decode: a wrong type, a missing or unknown field, a value outside the schema -> ``bad_fields``.

Every failure is one :class:`MalformedMessage` with a reason from the closed set :data:`REASONS`, so a
receiver counts it under a fixed metric label and drops the message; no exception of another type leaves here.

The depth check costs one C-speed pass over the bytes for a typical header (:func:`check_bounds`: a message
with at most :data:`MAX_DEPTH` bytes that could be container headers cannot be deeper than that); only a
message with more such bytes is walked item by item, iteratively.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_HEADER_BYTES = 64 * 1024
"""Headers above this size are rejected before decoding (a header is a few hundred bytes in practice)."""

MAX_DEPTH = 32
"""Nesting of msgpack arrays and maps, at most (the top-level map is depth 1). Headers nest 3 deep (a result's
head output's labels; a hop pair), a control request's camera settings about 6. Far below where msgspec's
recursion fails (about a thousand levels), and high enough that the fast path of :func:`check_bounds` takes
nearly every header (the 8-byte floats of an ROI header hold a few bytes that look like container headers)."""

REASONS = ("empty", "too_large", "pickle", "not_msgpack", "too_deep", "bad_fields", "version")
"""Every :attr:`MalformedMessage.reason` this module raises. Receivers add their own fixed reasons on top
(``frames``, ``tensor``, ``wrong_kind``, ...), each documented where it is raised."""

_CONTAINERS = bytes([*range(0x80, 0xA0), *range(0xDC, 0xE0)])  # fixmap, fixarray; array16/32, map16/32
_NOT_CONTAINERS = bytes(b for b in range(256) if b not in _CONTAINERS)

_SCALAR_BYTES = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1,
                 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}  # fmt: skip
"""Bytes after the type byte of fixed-size items: nil, bools, floats, ints, fixext (type byte + data)."""
_LENGTH_PREFIX = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),
                  0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)}  # fmt: skip
"""bin/str/ext: (bytes of the length prefix, extra bytes before the data: the ext type)."""


class MalformedMessage(ValueError):
    """A received message could not be decoded into a valid message.

    Recovery: count it under ``reason`` and drop the message; never crash. (A request/reply socket answers it
    with an error; nothing else replies.)

    Attributes:
        reason: short fixed label for metrics: one of :data:`REASONS`, or a receiver's own fixed reason
            (``frames``, ``tensor``, ``wrong_kind``, ...). Never built from the peer's bytes.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class _VersionProbe(msgspec.Struct):
    v: int


_probe_decoder = msgspec.msgpack.Decoder(_VersionProbe)


def decode_versioned(
    decoder: msgspec.msgpack.Decoder, frame: bytes | memoryview, version: int, max_bytes: int = MAX_HEADER_BYTES
) -> Any:
    """Decode one msgpack frame from a peer with ``decoder``, after the bounds and the version are checked.

    Args:
        decoder: the msgspec decoder of the expected type (a map with an integer ``v`` field).
        frame: the received bytes (or any object with the buffer protocol and a length, such as a ``zmq.Frame``;
            its size is checked before it is copied).
        version: the protocol version the ``v`` field must hold.
        max_bytes: largest accepted frame, bytes.

    Returns:
        What ``decoder`` decodes.

    Raises:
        MalformedMessage: ``empty``, ``too_large``, ``pickle``, ``not_msgpack``, ``too_deep``, ``bad_fields``
            (no integer ``v``, or the typed decode failed), ``version``.
    """
    size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
    if size > max_bytes:  # before the copy below
        raise MalformedMessage("too_large", f"{size} bytes > {max_bytes}")
    data = bytes(frame)
    if not data:
        raise MalformedMessage("empty")
    if data[0] == 0x80:  # pickle protocol >= 2 starts with the PROTO opcode; never unpickle, just name it
        raise MalformedMessage("pickle")
    if len(data.translate(None, _NOT_CONTAINERS)) > MAX_DEPTH:  # check_bounds' fast path, inline: a call less
        _walk(data, MAX_DEPTH)
    try:  # one handler for both decodes, in line: two calls less per header (issue 32)
        peer_version = _probe_decoder.decode(data).v  # checked first: another version may have other fields
        if peer_version != version:
            raise MalformedMessage("version", f"v={peer_version}, expected {version}")
        return decoder.decode(data)
    except msgspec.ValidationError as exc:  # well-formed msgpack, wrong kind, type, value or field
        raise MalformedMessage("bad_fields", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise MalformedMessage("not_msgpack", str(exc)) from None
    except RecursionError:  # unreachable after check_bounds; kept so that no decoder error can escape
        raise MalformedMessage("too_deep", "recursion") from None


def check_bounds(data: bytes, max_depth: int = MAX_DEPTH) -> None:
    """Check the nesting depth and the declared lengths of a msgpack message, without recursing.

    Fast path: depth is at most the number of container header bytes, so a message with at most ``max_depth``
    bytes that could be one (fixmap, fixarray, array16/32, map16/32, wherever they stand) passes after one
    ``bytes.translate`` (C speed). Otherwise :func:`_walk` reads the items one by one.

    Raises:
        MalformedMessage: ``too_deep`` (deeper than ``max_depth``), ``not_msgpack`` (a length beyond the bytes
            left, or the byte 0xc1 that msgpack never uses).
    """
    if len(data.translate(None, _NOT_CONTAINERS)) > max_depth:
        _walk(data, max_depth)


def _walk(data: bytes, max_depth: int) -> None:
    """Read the first msgpack object of ``data`` item by item (an explicit stack: never recursion)."""
    end, pos = len(data), 0
    stack: list[int] = []  # items still to read of each enclosing container
    left = 1  # items still to read at the current level (the top level holds one object)
    while True:
        while left == 0:
            if not stack:
                return
            left = stack.pop()
        if pos >= end:
            raise MalformedMessage("not_msgpack", "truncated")
        byte, pos, left = data[pos], pos + 1, left - 1
        if byte <= 0x7F or byte >= 0xE0:  # positive / negative fixint
            continue
        if 0xA0 <= byte <= 0xBF:  # fixstr
            pos += byte & 0x1F
        elif byte in _SCALAR_BYTES:
            pos += _SCALAR_BYTES[byte]
        elif byte in _LENGTH_PREFIX:
            width, extra = _LENGTH_PREFIX[byte]
            pos += width + extra + int.from_bytes(data[pos : pos + width], "big")
        elif byte == 0xC1:
            raise MalformedMessage("not_msgpack", "byte 0xc1")
        else:  # a container: fixmap, fixarray, array16/32, map16/32
            items, pos = _container_items(data, byte, pos)
            if len(stack) >= max_depth:
                raise MalformedMessage("too_deep", f"deeper than {max_depth}")
            if items > end - pos:  # every item takes at least one byte
                raise MalformedMessage("not_msgpack", f"{items} items in {end - pos} bytes")
            stack.append(left)
            left = items
        if pos > end:
            raise MalformedMessage("not_msgpack", "truncated")


def _container_items(data: bytes, byte: int, pos: int) -> tuple[int, int]:
    """Items (keys and values for a map) of the container whose type byte is ``byte``; position after its
    header."""
    if byte <= 0x9F:
        count = byte & 0x0F
        return (2 * count if byte <= 0x8F else count), pos
    width = 2 if byte in (0xDC, 0xDE) else 4
    count = int.from_bytes(data[pos : pos + width], "big")
    return (2 * count if byte >= 0xDE else count), pos + width

"""The edge control protocol (``vcascade camera`` <-> an edge's control socket): typed msgpack messages.

Kept outside the ``edge`` package so that the command-line client imports only msgspec, not the edge's
detector stack. The server side is :mod:`vcascade.edge.control`. Each message carries ``v`` (protocol version),
checked first like the wire protocol's: a request of another version is refused (the reply says which version
the edge speaks) and counted. A request's ``op`` tag selects its type; unknown fields are refused. Decoding is
bounded like every decoder of peer input (:mod:`vcascade.core.protocol.bounded_decode`: size, nesting depth, declared
lengths), and anything malformed raises :class:`vcascade.core.protocol.bounded_decode.MalformedMessage` with a fixed
reason.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from vcascade.core.protocol.bounded_decode import MAX_HEADER_BYTES, decode_versioned

PROTOCOL_VERSION = 1
"""Version of these messages (field ``v``), bumped on any incompatible change."""
MAX_REQUEST_BYTES = MAX_HEADER_BYTES
"""Largest accepted request, bytes (a camera's settings are a few hundred bytes)."""
MAX_REPLY_BYTES = 1024 * 1024
"""Largest accepted reply, bytes (it lists every camera of the edge, removed ones included: a few hundred at
about 200 bytes each)."""


class CameraAdd(msgspec.Struct, tag="camera_add", tag_field="op", forbid_unknown_fields=True):
    """Add camera ``name``; ``camera`` holds its settings (CameraConfig keys; ``edge`` may be omitted)."""

    name: str
    camera: dict[str, Any]
    v: int = PROTOCOL_VERSION


class CameraRemove(msgspec.Struct, tag="camera_remove", tag_field="op", forbid_unknown_fields=True):
    """Stop reading camera ``name``; its in-flight ROIs still end, then its books close."""

    name: str
    v: int = PROTOCOL_VERSION


class CameraList(msgspec.Struct, tag="camera_list", tag_field="op", forbid_unknown_fields=True):
    """Ask for the edge's cameras."""

    v: int = PROTOCOL_VERSION


Request = Union[CameraAdd, CameraRemove, CameraList]


class Reply(msgspec.Struct, forbid_unknown_fields=True):
    """The answer to one request. ``cameras``: name -> state, removal, frames, sent, results, drops, url."""

    ok: bool
    error: str | None = None
    cameras: dict[str, dict[str, Any]] = {}
    v: int = PROTOCOL_VERSION


_REQUEST_DECODER = msgspec.msgpack.Decoder(Request)
_REPLY_DECODER = msgspec.msgpack.Decoder(Reply)
_ENCODER = msgspec.msgpack.Encoder()


def encode(message: CameraAdd | CameraRemove | CameraList | Reply) -> bytes:
    """msgpack bytes of a request or reply."""
    return _ENCODER.encode(message)


def decode_reply(data: bytes) -> Reply:
    """Parse a reply.

    Raises:
        vcascade.core.protocol.bounded_decode.MalformedMessage: a malformed reply, or one of another version
            (``version``).
    """
    return decode_versioned(_REPLY_DECODER, data, PROTOCOL_VERSION, MAX_REPLY_BYTES)


def decode_request(data: bytes) -> CameraAdd | CameraRemove | CameraList:
    """Parse a request.

    Raises:
        vcascade.core.protocol.bounded_decode.MalformedMessage: a malformed request (reasons
            :data:`vcascade.core.protocol.bounded_decode.REASONS`); ``version``: a request of another protocol version,
            which the edge refuses.
    """
    return decode_versioned(_REQUEST_DECODER, data, PROTOCOL_VERSION, MAX_REQUEST_BYTES)

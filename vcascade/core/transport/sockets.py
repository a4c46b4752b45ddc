"""Thin ZeroMQ layer: socket options every vcascade socket needs, so none is set ad hoc.

* ``LINGER`` bounded: closing a socket with unsent messages never hangs a shutdown.
* ``ROUTER_MANDATORY`` on ROUTER sockets: a message to an unknown or gone peer raises
  ``zmq.ZMQError(EHOSTUNREACH)`` instead of vanishing, so the caller can count the drop.
* ``MAXMSGSIZE``: a peer cannot make us allocate an arbitrarily large message.
* High-water marks are explicit; the application queues above them are what bound memory.

:func:`waiting_messages` is the one way a socket loop takes what a socket holds: every waiting message without
blocking, at most ``RECV_BATCH`` per call. :func:`send_frames` sends one without blocking, for loops where a
message's cost matters (the broker's).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import zmq

LINGER_MS = 500
"""How long a closing socket may still try to deliver queued messages, ms."""

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest accepted ZeroMQ message part, bytes (a 4K BGR crop is 25 MB raw; JPEG crops are far smaller)."""

HWM = 10_000
"""Send/receive high-water mark, messages per peer."""

_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)  # ints: combining pyzmq's flag enums costs about 1 us per call
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_send = zmq.backend.Socket.send  # what zmq.Socket.send calls after its Python-level draft-API checks
_recv = zmq.backend.Socket.recv  # the compiled receive, called with positional arguments (keywords cost more)

RECV_BATCH = 256
"""Messages :func:`waiting_messages` takes from one socket per call, at most. A flooding peer then holds its
loop for one batch: the loop goes on to its other sockets, heartbeats and timers, and the messages left keep
the socket readable, so the next poll returns at once and takes the next batch. Nothing is dropped."""


def make_socket(
    ctx: zmq.Context, kind: int, identity: str | None = None, *, router_handover: bool = False
) -> zmq.Socket:
    """Create a socket with vcascade's standard options.

    Args:
        ctx: the process's single ``zmq.Context``.
        kind: ``zmq.ROUTER``, ``zmq.DEALER``, ``zmq.PUB``, ...
        identity: routing id for DEALER sockets (the peer name, so brokers can log it).
        router_handover: ROUTER only: a new connection with an identity already connected takes that identity
            over (``ZMQ_ROUTER_HANDOVER``), so a peer that reconnects after a silent link (Paranoid Pirate)
            is reachable at once instead of being refused until the old connection times out.
    """
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if router_handover:
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity.encode())
    return sock


def waiting_messages(sock: zmq.Socket, limit: int = RECV_BATCH, *, copy: bool = True) -> Iterator[list]:
    """Receive the multipart messages waiting on ``sock`` without blocking, at most ``limit`` per call.

    A generator: each message is received when the caller asks for the next one, so the caller decodes and
    handles one message (its clock reads, its replies) before the next is taken. It ends when nothing is waiting
    (``zmq.Again``; after the first message the socket's ``ZMQ_EVENTS`` is asked instead, a third of the cost for
    the common single message) or after ``limit`` messages; what is left stays queued in the socket for the next
    call (the socket stays readable to ``zmq.Poller``). Decoding, and counting malformed messages, is the caller's.

    Args:
        sock: a socket owned by the calling thread (ZeroMQ sockets are not thread-safe).
        limit: messages at most (>= 1); the default ``RECV_BATCH`` bounds how long one peer holds a loop.
        copy: False to receive ``zmq.Frame`` objects (zero-copy: ``frame.buffer`` is a memoryview on the
            message, and the frame can be sent on unchanged); True for ``bytes``.

    Yields:
        One message per item: its frames, ``list[bytes]`` (``copy=True``) or ``list[zmq.Frame]``.

    Raises:
        zmq.ZMQError: any error but ``EAGAIN`` (the socket was closed, the context terminated).
    """
    receive = sock.recv_multipart if copy else partial(_recv_frames, sock)
    for n in range(limit):
        if n == 1 and not sock.getsockopt(_EVENTS) & _POLLIN:
            return  # after one message, usually the only one: asking costs less than the zmq.Again below
        try:
            frames = receive(_NOBLOCK, copy=copy)
        except zmq.Again:
            return
        yield frames


def _recv_frames(sock: zmq.Socket, flags: int, copy: bool = False) -> list[zmq.Frame]:
    """``sock.recv_multipart(flags, copy=False)`` at half its cost: each frame says itself whether another follows
    (``zmq.Frame.more``, ``zmq_msg_more``), where ``recv_multipart`` asks the socket (``getsockopt(RCVMORE)``) after
    every frame. The parts of a message arrive together (ZeroMQ delivers all or none), so only the first receive
    can raise ``zmq.Again``. Each part is taken by the compiled ``recv`` with positional arguments:
    ``sock.recv(flags, copy=False)`` parses its keyword on every call, and for a 3-part message the two cost 6.3
    and 4.2 us (an inproc pair, 20,000 messages, best of 5; issue 32)."""
    frame = _recv(sock, flags, False)
    frames = [frame]
    while frame.more:
        frame = _recv(sock, flags, False)
        frames.append(frame)
    return frames


def send_frames(sock: zmq.Socket, frames: list) -> None:
    """``sock.send_multipart(frames, zmq.NOBLOCK)`` at a third of its cost (issue 32: 5 parts per ROI and its answer
    cost the broker more than its own bookkeeping): no per-call type checks and flag enums, and each part goes
    straight to pyzmq's compiled ``send`` (``zmq.backend.Socket.send``, which ``zmq.Socket.send`` wraps in Python for
    the draft ``routing_id``/``group`` arguments), about 0.2 us per part instead of 0.5 (``timeit``, 2-part
    messages). ``zmq.Frame`` parts (received with ``copy=False``) are sent on without a copy; ``bytes`` parts are
    copied into the message, which for small parts (routing ids, headers) costs less than pyzmq's zero-copy
    path for bytes (that copies below ``zmq.COPY_THRESHOLD`` anyway, after checking the size).

    Args:
        sock: a socket owned by the calling thread.
        frames: ``bytes`` or ``zmq.Frame`` parts, at least one.

    Raises:
        zmq.ZMQError: as ``send_multipart``: ``zmq.Again`` when the peer's pipe is full (``EAGAIN``),
            ``EHOSTUNREACH`` from a ROUTER with ``ROUTER_MANDATORY`` when the peer is gone. Both are raised by
            the first part: once it is queued, ZeroMQ takes the rest of the message.
    """
    for frame in frames[:-1]:
        _send(sock, frame, _NOBLOCK_MORE)
    _send(sock, frames[-1], _NOBLOCK)

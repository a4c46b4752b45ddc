"""The link between a worker and a stage group in another process: raw tensor frames over ZeroMQ.

Message (DEALER on the worker, ROUTER on the group)::

    [routing id added by the ROUTER][header][tensor 0][tensor 1]...

* ``header``: msgpack of :class:`LinkHeader` (``msgspec``): kind (``batch`` worker -> group, ``result`` or
  ``error`` group -> worker), the worker's micro-batch ``seq``, per tensor its shape, dtype, byte length and
  memory layout, and the compute time of every stage so far, s.
* one frame per tensor: its raw bytes, sent zero-copy (``copy=False`` on the tensor's own buffer) and received
  as a ``zmq.Frame`` whose memoryview becomes the tensor (``torch.frombuffer``): no copy,
  no pickle. Channels-last 4-d tensors travel as their NHWC buffer (``layout="nhwc"``) and are permuted back
  into channels-last NCHW views on arrival, so they are not copied into NCHW order first.

Anything that does not decode, or whose frames disagree with the header, raises
:class:`vcascade.core.protocol.wire.MalformedMessage` (counted by the receiver, then dropped). The header is decoded by
the bounded decoder every socket uses (:mod:`vcascade.core.protocol.bounded_decode`: size, depth, declared lengths,
version first), and every tensor spec is checked against the limits below and against its frame before a
tensor is made: at most :data:`MAX_TENSORS` tensors of at most :data:`MAX_TENSOR_DIMS` dimensions, a dtype of
:data:`DTYPES`, no dimension negative, at most :data:`MAX_TENSOR_ELEMENTS` elements (zero-sized dimensions
counted as 1, so a shape such as ``(0, 2**63)`` is refused too), and ``nbytes`` equal to both the frame's
length and elements x itemsize.

:class:`RemoteStages` (worker side) is the stage group as one asynchronous stage of the worker's
:class:`vcascade.center.stages.engine.StageEngine`.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
import time
import warnings
from typing import Literal, Sequence

import msgspec
import numpy as np
import torch
import zmq

from vcascade.core.protocol.bounded_decode import MalformedMessage, decode_versioned
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES, make_socket, waiting_messages

LINK_VERSION = 1
"""Version of :class:`LinkHeader`; a peer speaking another one is dropped as malformed."""
MAX_TENSORS = 16
"""Tensors per message at most (stage activations are one to a few tensors)."""
MAX_TENSOR_DIMS = 8
"""Dimensions of a tensor at most (activations are 2-d to 5-d)."""
MAX_TENSOR_ELEMENTS = MAX_MESSAGE_BYTES
"""Elements of a tensor at most, with zero-sized dimensions counted as 1 (a frame holds at most
``MAX_MESSAGE_BYTES`` bytes, and an element is at least one byte)."""
DTYPES = ("float32", "float16", "float64", "int64", "int32", "uint8", "bool")
"""Tensor dtypes the link carries (numpy names; bfloat16 has no numpy dtype)."""

CONNECT_GRACE_S = 1.0
"""How long a micro-batch may wait for a connection to the group (start-up, handshake) before it fails, s."""
POLL_MS = 20
"""Link thread poll timeout, ms: bounds how late a retry, a timeout or a stop is handled."""

_pipes = itertools.count()

warnings.filterwarnings("ignore", message="The given buffer is not writable")  # received frames: see _tensor


class TensorSpec(msgspec.Struct, frozen=True, array_like=True):
    """One tensor frame: ``shape`` (of the frame's array), numpy ``dtype`` name, ``nbytes``, ``layout``.

    ``layout`` ``"nhwc"``: the frame holds a channels-last (n, c, h, w) tensor as its (n, h, w, c) buffer.
    """

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    layout: Literal["c", "nhwc"] = "c"


class LinkHeader(msgspec.Struct, frozen=True, kw_only=True):
    """Header frame of a link message.

    Attributes:
        kind: ``batch`` (worker -> group), ``result`` or ``error`` (group -> worker).
        seq: the worker's micro-batch sequence number (answers carry it back; any order).
        tensors: one spec per tensor frame, in order (none for ``error``).
        compute_s: compute time of each pipeline stage so far, s, in stage order.
        error: what went wrong (``error`` only; never credentials).
    """

    kind: Literal["batch", "result", "error"]
    seq: int
    tensors: list[TensorSpec] = msgspec.field(default_factory=list)
    compute_s: list[float] = msgspec.field(default_factory=list)
    error: str = ""
    v: int = LINK_VERSION


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LinkHeader)


def encode_message(
    kind: str, seq: int, tensors: Sequence[torch.Tensor | np.ndarray], compute_s: Sequence[float] = (), error: str = ""
) -> list:
    """Header frame plus one zero-copy frame per tensor (CUDA tensors are copied to the CPU first).

    Returns:
        ``[header bytes, buffer, ...]`` for ``send_multipart(..., copy=False)``; the buffers reference the
        tensors' memory (pyzmq keeps them alive until sent).

    Raises:
        ValueError: more than :data:`MAX_TENSORS` tensors, or a dtype outside :data:`DTYPES`.
    """
    if len(tensors) > MAX_TENSORS:
        raise ValueError(f"{len(tensors)} tensors > {MAX_TENSORS}")
    specs, buffers = [], []
    for tensor in tensors:
        array, layout = _host_array(tensor)
        specs.append(TensorSpec(tuple(array.shape), array.dtype.name, array.nbytes, layout))
        buffers.append(array.reshape(-1).view(np.uint8) if array.size else b"")
    header = LinkHeader(kind=kind, seq=seq, tensors=specs, compute_s=list(compute_s), error=error)
    return [_encoder.encode(header), *buffers]


def _host_array(tensor: torch.Tensor | np.ndarray) -> tuple[np.ndarray, str]:
    """A C-contiguous CPU array of the tensor's data (a torch tensor, or the numpy array an ONNX stage returns),
    without a copy when it is already on the CPU and contiguous."""
    if isinstance(tensor, np.ndarray):
        if str(tensor.dtype) not in DTYPES:
            raise ValueError(f"dtype {tensor.dtype} cannot cross the link (allowed: {DTYPES})")
        return np.ascontiguousarray(tensor), "c"
    tensor = tensor.detach()
    if str(tensor.dtype).removeprefix("torch.") not in DTYPES:
        raise ValueError(f"dtype {tensor.dtype} cannot cross the link (allowed: {DTYPES})")
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    if tensor.dim() == 4 and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor.permute(0, 2, 3, 1).numpy(), "nhwc"  # the channels-last buffer itself, C-contiguous
    return tensor.contiguous().numpy(), "c"


def decode_message(frames: Sequence) -> tuple[LinkHeader, list[torch.Tensor]]:
    """Parse a link message (routing frames already removed).

    Args:
        frames: ``zmq.Frame`` objects (``recv_multipart(copy=False)``) or bytes: the header, then the tensors.

    Returns:
        ``(header, tensors)``; the tensors are CPU views on the received frames (treat them as read-only).

    Raises:
        MalformedMessage: reasons ``frames``, the bounded decoder's (``empty``, ``too_large``, ``pickle``,
            ``not_msgpack``, ``too_deep``, ``bad_fields``, ``version``), ``tensor`` (a spec outside the limits,
            or a frame that disagrees with its spec).
    """
    if not frames:
        raise MalformedMessage("frames", "no header")
    header = _decode_header(_buffer(frames[0]))
    if len(frames) - 1 != len(header.tensors) or len(header.tensors) > MAX_TENSORS:
        raise MalformedMessage("frames", f"{len(frames) - 1} tensor frames for {len(header.tensors)} specs")
    return header, [_tensor(spec, _buffer(frame)) for spec, frame in zip(header.tensors, frames[1:])]


def _buffer(frame) -> memoryview:
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def _decode_header(data: memoryview) -> LinkHeader:
    return decode_versioned(_decoder, data, LINK_VERSION)


def _tensor(spec: TensorSpec, data: memoryview) -> torch.Tensor:
    """The tensor a frame holds (a view, no copy), after checking its spec against the limits and the frame."""
    _check_spec(spec)
    dtype = np.dtype(spec.dtype)
    if not spec.nbytes == len(data) == math.prod(spec.shape) * dtype.itemsize:
        raise MalformedMessage("tensor", f"{len(data)} bytes for {spec}")
    if spec.nbytes == 0:
        tensor = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype))
    else:  # a view on the frame (which it keeps alive); read-only memory, so never written in place
        tensor = torch.frombuffer(data, dtype=getattr(torch, spec.dtype)).reshape(spec.shape)
    return tensor.permute(0, 3, 1, 2) if spec.layout == "nhwc" else tensor


def _check_spec(spec: TensorSpec) -> None:
    """Raise ``MalformedMessage("tensor")`` for a spec outside the module's limits (before any allocation)."""
    if spec.dtype not in DTYPES or len(spec.shape) > MAX_TENSOR_DIMS or any(d < 0 for d in spec.shape):
        raise MalformedMessage("tensor", f"bad spec {spec}")
    if spec.layout == "nhwc" and len(spec.shape) != 4:
        raise MalformedMessage("tensor", f"nhwc layout of a {len(spec.shape)}-d tensor")
    elements = 1
    for d in spec.shape:  # each step stays <= MAX_TENSOR_ELEMENTS * d: no huge products from huge dims
        elements *= max(d, 1)
        if elements > MAX_TENSOR_ELEMENTS:
            raise MalformedMessage("tensor", f"shape {spec.shape} over {MAX_TENSOR_ELEMENTS} elements")


# ---------------------------------------------------------------- worker side


class StageUnreachable(RuntimeError):
    """The stage group did not answer a micro-batch within the timeout, or no connection to it is up.

    Recovery: the worker drops the micro-batch's ROIs (``stage_error``, counted under reason
    ``stage_unreachable``) and keeps serving; the link reconnects on its own when the group comes back.
    """

    reason = "stage_unreachable"


class RemoteStageError(RuntimeError):
    """The stage group answered a micro-batch with an error (its stage raised). Counted as ``remote_error``."""

    reason = "remote_error"


class RemoteStages:
    """A stage group in another process, seen by the worker's engine as one asynchronous stage.

    Two threads: the engine's stage thread :meth:`send` s (encodes the activations and passes the frames over
    an ``inproc`` pipe, zero-copy), and the link thread owns the DEALER to the group: it forwards what was
    sent, receives answers (any order, matched by ``seq`` to the pending micro-batch, which carries its ROIs),
    and fails micro-batches unanswered for ``timeout_s``. With ``ZMQ_IMMEDIATE`` a message is never queued for
    a connection that is not up: it waits here for :data:`CONNECT_GRACE_S` at most (start-up, handshake), so
    a dead group fails micro-batches within that grace instead of after the timeout.
    After a timeout with the group silent, the DEALER is replaced (fresh connection, stale queue dropped).

    Timestamps: the answer of micro-batch ``b`` sent at ``t0`` and received at ``t1`` with group compute
    times ``d_0..d_m-1`` gets marks ``t0 + d_0``, ``t0 + d_0 + d_1``, ..., then ``t1`` named ``link``: the
    remote stages' hops are their compute times and ``link`` is the rest of the round trip (transfer both
    ways and queueing inside the group), all measured on this host's clock or as durations.

    Args:
        ctx: the process's zmq context.
        endpoint: the group's ``tcp://host:port``.
        num_stages: pipeline stages the group runs.
        timeout_s: a micro-batch unanswered this long fails as unreachable.
        secure: ``secure(sock)`` configures CurveZMQ on the DEALER before it connects (no-op when disabled).
        on_discard: ``on_discard(reason)``: an answer was dropped (``late``: its micro-batch had already
            failed; a :class:`MalformedMessage` reason).
    """

    def __init__(self, ctx, endpoint: str, num_stages: int, timeout_s: float, secure=None, on_discard=None) -> None:
        self.num_stages = num_stages
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._ctx = ctx
        self._secure = secure or (lambda sock: None)
        self._on_discard = on_discard or (lambda reason: None)
        self._pipe = f"inproc://vcascade-stage-link-{next(_pipes)}"
        self._pending: dict[int, tuple[object, float]] = {}
        self._unsent: collections.deque = collections.deque()  # (seq, frames, first try) while no connection
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._push = None
        self._pull = None
        self._thread: threading.Thread | None = None
        self._done = self._fail = None

    def start(self, done, fail) -> None:
        """Bind the inproc pipe and start the link thread (see :class:`vcascade.center.stages.engine.AsyncStage`)."""
        self._done, self._fail = done, fail
        self._pull = make_socket(self._ctx, zmq.PULL)
        self._pull.bind(self._pipe)
        self._thread = threading.Thread(target=self._run, name="stage-link", daemon=True)
        self._thread.start()

    def send(self, batch) -> None:
        """Encode ``batch.data`` and pass it to the link thread (stage thread only)."""
        frames = encode_message("batch", batch.seq, batch.data, batch.compute_s)
        if self._push is None:
            self._push = make_socket(self._ctx, zmq.PUSH)
            self._push.connect(self._pipe)
        with self._cond:
            self._pending[batch.seq] = (batch, time.perf_counter())
        self._push.send_multipart(frames, copy=False)

    def drain(self, timeout_s: float) -> bool:
        """Wait until no micro-batch is pending (answered, failed or timed out)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, None if math.isinf(timeout_s) else timeout_s)

    def close(self) -> None:
        """Stop the link thread; pending micro-batches fail as unreachable; close the sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._push is not None:
            self._push.close()
        if self._pull is not None:
            self._pull.close()

    @property
    def pending(self) -> int:
        """Micro-batches sent and not yet answered."""
        with self._cond:
            return len(self._pending)

    # ------------------------------------------------------------------ link thread

    def _run(self) -> None:
        dealer = self._connect()
        heard_s = time.monotonic()
        try:
            while not self._stop.is_set():
                events = dict(self._poller(dealer).poll(POLL_MS))
                if self._pull in events or self._unsent:
                    self._forward(dealer)
                if dealer in events:
                    heard_s = self._receive(dealer, heard_s)
                if self._expire(time.perf_counter()) and time.monotonic() - heard_s > self.timeout_s:
                    dealer.close(linger=0)
                    dealer = self._connect()  # a fresh connection: nothing stale is delivered later
        finally:
            dealer.close(linger=0)
            self._expire(float("inf"))

    def _connect(self):
        dealer = make_socket(self._ctx, zmq.DEALER)
        dealer.setsockopt(zmq.IMMEDIATE, 1)
        self._secure(dealer)
        dealer.connect(self.endpoint)
        return dealer

    def _poller(self, dealer):
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        return poller

    def _forward(self, dealer) -> None:
        """Send what the stage thread queued, after what is still waiting for a connection (in order)."""
        for frames in waiting_messages(self._pull, copy=False):
            self._unsent.append((_decode_header(frames[0].buffer).seq, frames, time.monotonic()))
        self._send_unsent(dealer)

    def _send_unsent(self, dealer) -> None:
        """Try the waiting messages; one waiting longer than the connect grace fails as unreachable."""
        while self._unsent:
            seq, frames, since = self._unsent[0]
            with self._cond:
                still_pending = seq in self._pending
            if still_pending:
                try:
                    dealer.send_multipart(frames, zmq.NOBLOCK, copy=False)
                except zmq.Again:  # no connection up (ZMQ_IMMEDIATE) or the group far behind
                    if time.monotonic() - since <= min(self.timeout_s, CONNECT_GRACE_S):
                        return
                    self._resolve(seq, error=StageUnreachable(f"no connection to {self.endpoint}"))
            self._unsent.popleft()

    def _receive(self, dealer, heard_s: float) -> float:
        """Resolve the answers waiting on ``dealer`` (``RECV_BATCH`` at most); returns when the group was last
        heard from, ``time.monotonic()`` s."""
        for frames in waiting_messages(dealer, copy=False):
            heard_s = time.monotonic()
            try:
                header, tensors = decode_message(frames)
            except MalformedMessage as exc:
                self._on_discard(exc.reason)
                continue
            if header.kind == "error":
                self._resolve(header.seq, error=RemoteStageError(header.error))
            else:
                self._resolve(header.seq, tensors=tensors, compute_s=header.compute_s)
        return heard_s

    def _resolve(self, seq: int, tensors=None, compute_s=(), error: BaseException | None = None) -> None:
        with self._cond:
            entry = self._pending.get(seq)
        if entry is None:
            self._on_discard("late")
            return
        batch, t_sent = entry
        if error is not None:
            self._fail(batch, error)
        else:
            self._finish(batch, t_sent, time.perf_counter(), tensors, compute_s[-self.num_stages:])
        with self._cond:
            self._pending.pop(seq, None)
            self._cond.notify_all()

    def _finish(self, batch, t_sent: float, t_received: float, tensors, remote_s: Sequence[float]) -> None:
        t = t_sent
        for seconds in remote_s:
            t = min(t + seconds, t_received)
            batch.mark(t)
            batch.compute_s.append(seconds)
        batch.mark(t_received, "link")
        batch.data = tuple(tensors)
        self._done(batch, remote_s)

    def _expire(self, now_s: float) -> bool:
        """Fail micro-batches sent more than ``timeout_s`` before ``now_s``; True when any expired."""
        with self._cond:
            expired = [seq for seq, (_, t_sent) in self._pending.items() if now_s - t_sent > self.timeout_s]
        for seq in expired:
            self._resolve(seq, error=StageUnreachable(f"no answer from {self.endpoint} in {self.timeout_s:g} s"))
        return bool(expired)

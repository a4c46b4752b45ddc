"""Wire protocol: typed message headers carried as msgpack, payloads as raw frames.

A message on any vcascade socket is a ZeroMQ multipart message::

    [routing frames added by ROUTER sockets...][header][payload...]

* ``header`` is msgpack of one of the ``msgspec.Struct`` classes below, tagged by its ``kind`` field
  (``roi``, ``result``, ``drop``, ``ready``, ``heartbeat``, ``bye``) and carrying the protocol version ``v``.
  Decoding is bounded before anything is allocated (size, nesting depth, declared lengths:
  :mod:`vcascade.core.protocol.bounded_decode`) and validates every field's type; anything else raises
  :class:`MalformedMessage` with a fixed ``reason`` that the receiver counts in its
  ``*_malformed_messages_total{reason}`` metric before dropping the message. Nothing here ever unpickles:
  pickle on a socket is remote code execution.
* Every string of a header that ends up as a metric label or a value of a result line is checked at decode
  against its known set: a drop ``reason`` (:data:`DropReason`), a hop name (:data:`HOP_NAMES`), a
  worker or component name (:data:`vcascade.core.names.NAME_PATTERN`); a made-up one is ``bad_fields``.
* ``payload`` frames are raw bytes (a JPEG crop for ``roi``), never re-encoded.
* A ``result`` carries one typed head output (:data:`HeadOutput`), itself tagged by its ``head`` field
  (``embedding``, ``classifier``, ``text``: the recognizer's ``head.type``); an unknown tag or a wrongly typed
  field is ``bad_fields`` like any other.

Routing: edges and workers talk only to brokers. The broker remembers, per ROI id, which edge sent it and
which worker holds it, so workers need no routing frames and results find their way back by ``roi_id``.

Latency account: hops are ``(name, milliseconds)`` pairs. Each hop is a duration measured on one host's
monotonic clock, so no clock synchronisation between hosts is needed (see DESIGN.md, "The flow of one ROI").
"""

from __future__ import annotations

from typing import Annotated, Literal, Union, get_args

import msgspec

from vcascade.core.protocol.bounded_decode import (  # noqa: F401  (MAX_HEADER_BYTES, MalformedMessage: wire's API)
    MAX_HEADER_BYTES,
    MalformedMessage,
    decode_versioned,
)
from vcascade.core.names import NAME_MAX_CHARS, check_name

PROTOCOL_VERSION = 2
"""Bumped on any incompatible header change; a peer speaking another version is dropped as malformed.
2: ``Result`` carries one typed ``output`` per head kind instead of every head's fields side by side, and
``Ready`` must name its recognizer."""

PeerName = Annotated[str, msgspec.Meta(min_length=1, max_length=NAME_MAX_CHARS)]
"""A component's config name (a worker, a broker, a camera): :data:`vcascade.core.names.NAME_PATTERN`. msgspec checks
the length; the characters are checked by the header's ``__post_init__`` (:func:`vcascade.core.names.check_name`),
which msgspec runs when it decodes one (a failure is a ``ValidationError``: ``bad_fields``). A ``Meta(pattern=...)``
cost 1-3 us per field on every decode (the broker decodes two per ROI; ``timeit``, issue 32)."""

MAX_HOP_STAGES = 100
"""Pipeline stages a latency account may name (``stage0`` .. ``stage99``)."""
HOP_NAMES: tuple[str, ...] = (
    "batch_wait", "preprocess", *(f"stage{k}" for k in range(MAX_HOP_STAGES)), "link", "head",  # worker
    "broker_queue", "transit_broker_worker", "broker_return",  # broker
)
"""Hop names a worker or a broker may put in a latency account (``vcascade.center.intake.microbatch``,
``vcascade.broker.books``); the edge writes them as result-line keys and ``hop`` label values. Checked as a
``Literal`` (a set lookup at decode; a regular expression cost about 1 us per hop)."""

Hop = tuple[Literal[HOP_NAMES], float]
"""One entry of the latency account: (hop name, one of :data:`HOP_NAMES`; duration in milliseconds)."""

DropReason = Literal[
    "stale", "queue_full", "no_worker", "worker_lost", "shutdown",  # broker
    "overload", "decode_error", "preprocess_error", "stage_error", "head_error",  # worker (and shutdown, stale)
]
"""Why a broker or a worker gave up on an ROI: the closed set of :attr:`Drop.reason`. The edge counts it as
the ``reason`` label of ``vcascade_edge_roi_drops_total`` and writes it into the ROI's line, so a new reason is
added here (a peer's made-up reason is ``bad_fields``, not a new label value)."""
DROP_REASONS: tuple[str, ...] = get_args(DropReason)

SendReason = Literal["", "first", "refresh", "better", "every_detection"]
"""Why the edge's ROI policy sent an ROI (``vcascade.edge.selection.roi_selection.SENT_REASONS``; ``""``: not said):
the closed set of :attr:`Roi.send_reason` (a header without it decodes as ``""``: older edges still work)."""
DEFERRABLE_SEND_REASONS: frozenset[str] = frozenset({"refresh", "better"})
"""Send reasons of an ROI whose track was recognised already (a new look, a better crop): brokers dispatch
them after the other ROIs of their queue and drop them first when a bound is exceeded (issue 21), as edges
shed them first (``vcascade.edge.selection.degrade``)."""


class _Header(msgspec.Struct, tag_field="kind", frozen=True, kw_only=True):
    v: int = PROTOCOL_VERSION


class Roi(_Header, tag="roi"):
    """A region of interest on its way from an edge to a worker. Payload: one frame of encoded crop bytes.

    Attributes:
        roi_id: globally unique id (``<edge run id>-<counter>``); results carry it back.
        camera: camera name from the config (never its URL, which may hold credentials).
        frame_seq: index of the decoded frame in the camera's stream, from 0.
        stream_ts_ms: the frame's presentation timestamp in the stream, ms (from the container/RTP PTS).
        capture_unix_ms: wall-clock time at which the edge received the frame, ms since the Unix epoch.
        xyxy: detection box in original-frame pixels (x1, y1, x2, y2), float.
        crop_xyxy: the box actually cropped (padded, clamped to the frame), integer pixels.
        class_id: detector class index (COCO ids for YOLOX).
        score: detector confidence (objectness x class score), 0..1.
        encoding: payload encoding, ``"jpeg"``.
        ttl_ms: time the ROI may still wait before compute, ms, measured from when it is sent; a hop that
            holds it longer drops it as ``stale``. ``0`` means no deadline.
        attempt: 0 for the first send, incremented on each retry.
        track_id: the edge tracker's id of the detection's track on its camera, ``-1`` when untracked.
        recognizer: name of the recognizer this ROI is for (``recognizers`` key); brokers dispatch it only to
            workers announcing that recognizer. ``""``: any worker (a camera without routes whose edge's
            brokers serve several recognizers, :meth:`vcascade.core.schema.Deployment.routes_of`).
        send_reason: why the ROI policy sent it (:data:`SendReason`); brokers dispatch refreshes and better
            crops (:data:`DEFERRABLE_SEND_REASONS`) after the other ROIs queued. ``""``: not said (served with
            first sightings).
        track_identity_id: the identity the recognizer's latest answer for this track named (>= 1), as the edge
            knows it when it sends; -1: none yet (or untracked, or provisional). Lets whichever worker receives
            the ROI continue the track's identity (docs/IDENTITY.md, "Identities from tracks").
    """

    roi_id: str
    camera: PeerName
    frame_seq: int
    stream_ts_ms: float
    capture_unix_ms: float
    xyxy: tuple[float, float, float, float]
    crop_xyxy: tuple[int, int, int, int]
    class_id: int
    score: float
    encoding: str = "jpeg"
    ttl_ms: float = 0.0
    attempt: int = 0
    track_id: int = -1
    recognizer: Annotated[str, msgspec.Meta(max_length=NAME_MAX_CHARS)] = ""
    send_reason: SendReason = ""
    track_identity_id: int = -1

    def __post_init__(self) -> None:
        check_name(self.camera)
        if self.recognizer:
            check_name(self.recognizer)


class _HeadOutputBase(msgspec.Struct, tag_field="head", frozen=True):
    """What one recognition head answered for one ROI, tagged by ``head`` (the head's config ``type``).

    The edge writes an output's fields as top-level keys of the ROI's result line, by their names, so field
    names are the line's keys and must not collide with the line's other keys (``roi_id``, ``camera``, ...).
    The structs live here, not with the heads (``vcascade.center.heads``), because every receiver of a
    ``Result`` (broker, edge) decodes and validates them and must not import the center.

    Readers outside the head's own type and the edge's line formatter (``vcascade.edge.sinks.lines``) use the
    accessors below, never a head's field names: a new head answers them for itself.
    """

    def gallery_identity(self) -> int | None:
        """The gallery identity this answer names (an id >= 0 of the recognizer's identity space); None when
        the head gives none, or the id is provisional (< 0)."""
        return None

    def read_text(self) -> str | None:
        """The text this answer read (``''``: nothing read or under the head's ``min_score``); None when the
        head reads no text."""
        return None

    def reading_score(self) -> float | None:
        """How sure the text read is, 0..1 (0.0: nothing read); None when the head reads no text. The edge keeps
        each track's best reading by it (:class:`vcascade.edge.selection.identity_cache.IdentityCache`)."""
        return None

    def short_label(self) -> str | None:
        """A few characters for a person looking at the track (a preview's box label); None: nothing to show."""
        return None

    def provisional_identity(self) -> int | None:
        """The provisional identity this answer names (< 0, local to the worker that answered until the store
        reconciles it); None when the answer names none."""
        return None

    def identity_merges(self) -> tuple[int, ...]:
        """Ids merged into the answered identity since this worker last answered with it (store duplicates, or its
        own provisional ids once reconciled); ``()`` for none."""
        return ()


class EmbeddingOutput(_HeadOutputBase, tag="embedding"):
    """The embedding head's answer: a gallery identity (re-identification across cameras).

    Attributes:
        identity_id: the identity matched or enrolled in the recognizer's identity space: >= 1 when the store
            gave it (stable across workers and restarts), <= -2 while provisional (local to the worker).
        similarity: cosine similarity to that identity, -1..1 (1.0 for a newly enrolled identity).
        enrolled: True when the embedding enrolled a new identity instead of matching one.
        provisional: True when the worker answered out of sync with the identity store (store away or slow),
            or the identity has no store id yet; the id may later be merged into another.
        merged_from: ids merged into ``identity_id`` since this worker last answered with it: duplicates of one
            object enrolled by two workers, or provisional ids replaced by this store id. Each merged id is
            reported once per worker.
        runner_up_id: the second most similar identity at or above the match threshold when the embedding
            matched (-1: none, or enrolled). An answer with a runner-up is ambiguous between two identities:
            workers whose copies of the space differ by their latest unpushed matches may answer it apart
            (docs/IDENTITY.md, "What is left").
        runner_up_similarity: its cosine similarity, -1..1; None without a runner-up.
        crop_identity_id: the identity this crop alone matched at or above the match threshold, before any
            enrolment (-1: none). On a tracked ROI ``identity_id`` is the track's (its aggregate's), which may
            differ (docs/IDENTITY.md, "Identities from tracks").
        crop_similarity: the crop's cosine similarity to ``crop_identity_id``, -1..1; None when it is -1.
        track_looks: looks of the ROI's track combined into the answer (0: the ROI was matched alone, untracked).
        identity_revised_from: the identity this track was answered with before, when more looks moved its
            aggregate to another one (``identity_id``); -1: unchanged.
    """

    identity_id: int
    similarity: float
    enrolled: bool
    provisional: bool = False
    merged_from: tuple[int, ...] = ()
    runner_up_id: int = -1
    runner_up_similarity: float | None = None
    crop_identity_id: int = -1
    crop_similarity: float | None = None
    track_looks: int = 0
    identity_revised_from: int = -1

    def gallery_identity(self) -> int | None:
        return self.identity_id if self.identity_id >= 0 else None

    def short_label(self) -> str | None:
        identity = self.gallery_identity()
        return None if identity is None else f"id {identity}"

    def provisional_identity(self) -> int | None:
        return self.identity_id if self.identity_id < -1 else None

    def identity_merges(self) -> tuple[int, ...]:
        return self.merged_from


class ClassifierOutput(_HeadOutputBase, tag="classifier"):
    """The classifier head's answer: the top-k labels, best first.

    Attributes:
        labels: the top-k class names, best first.
        label_scores: their scores (probabilities when the head applies a softmax), 0..1, same length and
            order as ``labels``.

    Raises:
        ValueError: ``labels`` and ``label_scores`` differ in length (on decoding: ``bad_fields``).
    """

    labels: tuple[str, ...]
    label_scores: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.label_scores):
            raise ValueError(f"{len(self.labels)} labels but {len(self.label_scores)} label_scores")

    def short_label(self) -> str | None:
        return self.labels[0] if self.labels else None


class TextRegion(msgspec.Struct, frozen=True):
    """One text region a two-model text recognizer (``type: ocr``) found on the crop, and what it read there.

    Attributes:
        text: the decoded text; ``''`` when nothing was read or its score is under the head's ``min_score``.
        text_score: mean max-probability of the decoded characters' time steps, 0..1 (0.0 for no text).
        box: the region's axis-aligned box in crop pixels (x1, y1, x2, y2), the crop being ``Roi.crop_xyxy``.
        detection_score: mean text probability inside the region (DB detection), 0..1.
    """

    text: str
    text_score: float
    box: tuple[float, float, float, float]
    detection_score: float


class TextOutput(_HeadOutputBase, tag="text"):
    """The text head's answer (CTC text recognition).

    Attributes:
        text: the decoded text (with ``texts``: the best reading, the region read with the highest score);
            ``''`` when nothing was read or its score is under the head's ``min_score``.
        text_score: mean max-probability of the decoded characters' time steps, 0..1 (0.0 for no text).
        texts: every region a two-model recognizer (``type: ocr``) found, in reading order; empty for a
            single-model recognizer (which reads the whole crop) and for a crop with no text.
    """

    text: str
    text_score: float
    texts: tuple[TextRegion, ...] = ()

    def read_text(self) -> str | None:
        return self.text

    def reading_score(self) -> float | None:
        return self.text_score if self.text else 0.0

    def short_label(self) -> str | None:
        return self.text or None


HEAD_OUTPUTS = (EmbeddingOutput, ClassifierOutput, TextOutput)
"""Every head output type; a new head kind adds its output struct here (and its head to
``vcascade.center.heads.HEADS`` under the same tag)."""

HeadOutput = Union[HEAD_OUTPUTS]
"""One of :data:`HEAD_OUTPUTS`, told apart by its ``head`` tag."""


class Result(_Header, tag="result"):
    """The recognition result for one ROI, from a worker back through the broker to the edge. No payload.

    Attributes:
        roi_id: the id of the ROI this answers.
        worker: name of the worker that computed it.
        output: what the recognizer's head answered (one of :data:`HEAD_OUTPUTS`); None: an answer without
            a head output (load generators such as ``tools/bench_broker.py``).
        hops: latency account appended by the worker and the broker, in order, durations in ms.
    """

    roi_id: str
    worker: PeerName
    output: HeadOutput | None = None
    hops: list[Hop] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        check_name(self.worker)


class Drop(_Header, tag="drop"):
    """A hop gave up on an ROI; sent back to the edge so that it is accounted, not timed out.

    Attributes:
        roi_id: the dropped ROI.
        reason: one of :data:`DROP_REASONS` (``stale``, ``stage_error``, ``no_worker``, ...), a metric label.
        where: the component that dropped it (broker or worker name).
    """

    roi_id: str
    reason: DropReason
    where: PeerName

    def __post_init__(self) -> None:
        check_name(self.where)


class Ready(_Header, tag="ready"):
    """A worker announces itself and its credits: how many ROIs it can hold in flight at once.

    ``recognizer`` names the recognizer it runs (``recognizers`` key, never empty); the broker gives it only
    ROIs for that recognizer or for any (``Roi.recognizer`` ``""``). ``start_delay_ms``: the worker's estimate
    of how long a micro-batch closed now would wait before its first stage starts, ms
    (:class:`vcascade.center.intake.microbatch.StartEstimate`; 0: none). The broker does not dispatch an ROI that would
    start past its deadline. Added with a default: older peers ignore it or send none (protocol 2 still).
    """

    worker: PeerName
    credits: int
    recognizer: PeerName
    start_delay_ms: float = 0.0

    def __post_init__(self) -> None:
        check_name(self.worker)
        check_name(self.recognizer)


class Heartbeat(_Header, tag="heartbeat"):
    """Liveness signal; sent both ways between brokers and their peers.

    ``backlog_ms`` (broker to edge): how long ROIs now wait in the broker's queues before dispatch, ms (mean of
    the recent waits; 0 when nothing is queued); an edge lowers what it sends while it is high
    (:mod:`vcascade.edge.selection.degrade`). Added with a default: older peers ignore it or send none (protocol 2 still).
    """

    sender: str
    backlog_ms: float = 0.0


class Bye(_Header, tag="bye"):
    """A peer leaves cleanly; the broker stops dispatching to it at once."""

    sender: str


Message = Union[Roi, Result, Drop, Ready, Heartbeat, Bye]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode(header: Message) -> bytes:
    """Serialise a header struct to msgpack bytes (one ZeroMQ frame)."""
    return _encoder.encode(header)


def decode(frame: bytes | memoryview) -> Message:
    """Parse one header frame.

    Args:
        frame: the raw header frame.

    Returns:
        The typed header (one of :data:`Message`).

    Raises:
        MalformedMessage: empty, oversized, pickled, non-msgpack, too deeply nested, wrongly typed or
            wrong-version headers (reasons: :data:`vcascade.core.protocol.bounded_decode.REASONS`).
    """
    return decode_versioned(_decoder, frame, PROTOCOL_VERSION)


def split_message(frames: list, n_routing: int) -> tuple[list, Message, list]:
    """Split a received multipart message into routing frames, decoded header and payload frames.

    Args:
        frames: all frames as received: ``bytes``, ``memoryview`` or any object with the buffer protocol and a
            length (``zmq.Frame``), returned as given.
        n_routing: number of leading routing frames (1 on a ROUTER socket, 0 on a DEALER).

    Returns:
        ``(routing, header, payload)``.

    Raises:
        MalformedMessage: too few frames (``frames``), a bad header, or a payload count that does not fit
            the kind (an ``roi`` needs exactly one payload frame, other kinds none).
    """
    if len(frames) < n_routing + 1:
        raise MalformedMessage("frames", f"{len(frames)} frames")
    routing, header_frame, payload = frames[:n_routing], frames[n_routing], frames[n_routing + 1 :]
    header = decode_versioned(_decoder, header_frame, PROTOCOL_VERSION)  # decode(), less a call per message
    expected = 1 if isinstance(header, Roi) else 0
    if len(payload) != expected:
        raise MalformedMessage("frames", f"{type(header).__name__} with {len(payload)} payload frames")
    return routing, header, payload

"""Pure bookkeeping of the edge's broker link: each ROI's record and latency account, the books per camera, broker
liveness, broker choice, retries.

No sockets and no clock reads: callers pass ``now_s`` (``time.perf_counter()`` seconds), so every rule here
is tested without processes (tests/edge/link/test_state.py), like :mod:`vcascade.broker.dispatch` for the broker.

Liveness follows the Paranoid Pirate pattern (ZeroMQ Guide, chapter 4) as agreed in DESIGN.md: any message
from a broker proves it alive; a broker silent for ``liveness * interval_s`` seconds is dead until its next
message. A broker never heard from is not alive. Who is silent is kept by
:class:`vcascade.core.transport.liveness.PeerLiveness`; a broker is alive while that table knows it, so it stays alive until
:meth:`BrokerTable.expire` or :meth:`BrokerTable.lost` declares it dead (and its ROIs are retried at that moment).

Broker choice: each ROI goes to the live broker with the fewest ROIs in flight (ties: round-robin), which
spreads load by how fast each broker answers and never sends to a dead broker. A retry avoids the broker it
was last sent to when another live broker exists.

**One ROI's record** (:class:`PendingRoi`) and how its latency account is closed when the answer arrives
(:func:`close_account`; the output lines are written by :mod:`vcascade.edge.sinks.lines`).

Every duration is measured on one host's monotonic clock (DESIGN.md): the edge measures its own hops and
the round trip; the broker and the worker report their own hold times as hops in the result. The network
time is what the round trip leaves once those holds are subtracted:

    transit = (edge round trip - everything the broker and the worker held) + broker<->worker transit
              + the broker's forwarding of the result

Its total is exact. One-way legs cannot be told apart without synchronised clocks, so
``transit_to_worker`` and ``transit_back`` are each half of it (the symmetric-path assumption NTP makes,
RFC 5905 section 8). All hops sum to ``end_to_end`` (capture to result on the edge).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from vcascade.core.protocol.wire import Result, Roi
from vcascade.core.transport.liveness import PeerLiveness
from vcascade.edge.metrics import EdgeTelemetry

LATENCY_SAMPLES = 20_000
"""End-to-end latencies kept per camera for the run summary's percentiles (a sliding window)."""


@dataclass
class PendingRoi:
    """What the edge keeps about an ROI from creation to its result or drop.

    ``roi`` is the header as created (detection, camera, stream timestamp; ``ttl_ms`` is filled in at send
    time; the link replaces it with ``attempt + 1`` before a retry). Times are ``time.perf_counter()`` seconds
    on the edge; ``sent_s`` is set each time it goes on a socket (the last send is the one answered).
    ``send_reason`` is why the ROI policy sent it (``first``, ``refresh``, ``better``, ``every_detection``).
    ``class_name`` is the detector's name for ``roi.class_id`` (None: the COCO name). ``redacted`` says whether
    the crop's faces were redacted (its :class:`~vcascade.edge.privacy.redaction.RedactedImage`'s flag, set by the
    link when it takes the crop), for ``vcascade_edge_images_out_total``. ``keep_crop``: the crop may also be kept as
    the history's evidence (its faces are redacted, or the camera's ``snapshot`` exit keeps faces anyway); False
    for a route given faces unredacted (``unredacted_faces``) on a camera whose snapshots are redacted.
    """

    roi: Roi
    capture_s: float
    detect_start_s: float
    detect_end_s: float
    encoded_s: float
    sent_s: float = 0.0
    send_reason: str = ""
    class_name: str | None = None
    redacted: bool = False
    keep_crop: bool = True

    @property
    def roi_id(self) -> str:
        return self.roi.roi_id

    @property
    def camera(self) -> str:
        return self.roi.camera


WORKER_HOPS_BEFORE_STAGES = ("batch_wait", "preprocess")
BROKER_HOPS = ("broker_queue", "transit_broker_worker", "broker_return")


def close_account(pending: PendingRoi, result: Result, received_s: float) -> dict[str, float]:
    """The ROI's latency account in ms, ordered along its path, ending with ``end_to_end``.

    Args:
        pending: the edge's record (its own timestamps).
        result: the answer, whose ``hops`` hold the worker's then the broker's durations (ms).
        received_s: ``perf_counter()`` when the edge received the result.

    Returns:
        ``{"frame_wait", "detect", "crop_encode", "edge_queue", "transit_to_worker", "broker_queue",
        <worker hops...>, "transit_back", "end_to_end"}`` in ms; all but ``end_to_end`` sum to ``end_to_end``.
    """
    remote = dict(result.hops)
    round_trip_ms = (received_s - pending.sent_s) * 1000.0
    edge_broker_net_ms = max(0.0, round_trip_ms - sum(ms for _, ms in result.hops))
    transit_ms = edge_broker_net_ms + remote.get("transit_broker_worker", 0.0) + remote.get("broker_return", 0.0)
    account = {
        "frame_wait": (pending.detect_start_s - pending.capture_s) * 1000.0,
        "detect": (pending.detect_end_s - pending.detect_start_s) * 1000.0,
        "crop_encode": (pending.encoded_s - pending.detect_end_s) * 1000.0,
        "edge_queue": (pending.sent_s - pending.encoded_s) * 1000.0,
        "transit_to_worker": transit_ms / 2.0,
        "broker_queue": remote.get("broker_queue", 0.0),
    }
    for hop, ms in result.hops:
        if hop not in BROKER_HOPS:
            account[hop] = ms
    account["transit_back"] = transit_ms / 2.0
    account["end_to_end"] = (received_s - pending.capture_s) * 1000.0
    return {hop: round(ms, 3) for hop, ms in account.items()}


@dataclass
class CameraTally:
    """Per-camera accounting: every ROI sent ends in ``results`` or in ``drops[reason]``."""

    sent: int = 0
    results: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    end_to_end_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())


class LinkBooks:
    """The link's accounting: per camera, what was sent and how each ROI ended, kept in step with the metrics.

    Each event of an ROI's life is one call here (:meth:`submitted`, :meth:`answered`, :meth:`dropped`), which
    updates both the camera's :class:`CameraTally` (the snapshot's books) and the edge's metrics. Not
    thread-safe: the link calls it under its lock.

    Args:
        telemetry: the edge's metrics.
        cameras: the cameras whose books open at start.
        deadline_ms: the edge's ``roi.deadline_ms`` (0: results are not counted as on time or late).
    """

    def __init__(self, telemetry: EdgeTelemetry, cameras: Iterable[str], deadline_ms: float) -> None:
        self.telemetry, self.deadline_ms = telemetry, deadline_ms
        self.tally: dict[str, CameraTally] = {camera: CameraTally() for camera in cameras}

    def open_camera(self, camera: str) -> None:
        """Open the books of a camera added at run time (a camera added again continues its earlier books)."""
        self.tally.setdefault(camera, CameraTally())

    def submitted(self, pending: PendingRoi) -> None:
        """An ROI was handed to the link."""
        self.tally[pending.camera].sent += 1
        self.telemetry.roi_submitted(pending.roi)

    def answered(self, pending: PendingRoi, latency_ms: dict[str, float]) -> None:
        """An ROI got its result; ``latency_ms`` is its closed account (ms per hop, with ``end_to_end``)."""
        tally = self.tally[pending.camera]
        tally.results += 1
        tally.end_to_end_ms.append(latency_ms["end_to_end"])
        self.telemetry.result_received(pending.roi, latency_ms)
        if self.deadline_ms > 0:
            self.telemetry.result_timeliness(latency_ms["end_to_end"] <= self.deadline_ms)

    def dropped(self, pending: PendingRoi, reason: str) -> None:
        """An ROI ended without a result, for ``reason``."""
        tally = self.tally[pending.camera]
        tally.drops[reason] = tally.drops.get(reason, 0) + 1
        self.telemetry.roi_dropped(pending.camera, reason)


@dataclass
class Flight:
    """An ROI on its way: the JPEG payload is kept for retries; ``broker`` is the index it was last sent to."""

    pending: PendingRoi
    payload: bytes
    broker: int


@dataclass
class BrokerState:
    """What the edge knows about one broker.

    Its liveness is :meth:`BrokerTable.alive`.

    Attributes:
        name: the broker's key in the deployment.
        last_heard_s: ``perf_counter()`` seconds of its last message; None before the first (kept while it is
            dead, for the snapshot's ``silent_s``).
        in_flight: ROIs sent to it and not yet answered, retried or dropped.
        sent: ROIs sent to it since start, retries and probes included.
    """

    name: str
    last_heard_s: float | None = None
    in_flight: int = 0
    sent: int = 0


class BrokerTable:
    """Liveness and load of the edge's brokers, by index (the order of ``EdgeConfig.brokers``).

    Args:
        names: broker names, one per socket.
        interval_s: heartbeat interval, seconds (``HeartbeatConfig.interval_s``).
        liveness: intervals of silence after which a broker is dead (``HeartbeatConfig.liveness``).

    Raises:
        ValueError: no broker names, or a non-positive interval or liveness.
    """

    def __init__(self, names: Iterable[str], interval_s: float, liveness: int) -> None:
        self.states = [BrokerState(name) for name in names]
        if not self.states or interval_s <= 0 or liveness < 1:
            raise ValueError("need at least one broker, interval_s > 0 and liveness >= 1")
        self.interval_s = interval_s
        self._liveness: PeerLiveness[int] = PeerLiveness(interval_s * liveness, len(self.states))
        self._next = 0
        self._last_heartbeat_s: float | None = None

    def __len__(self) -> int:
        return len(self.states)

    @property
    def any_alive(self) -> bool:
        """True while at least one broker is alive."""
        return len(self._liveness) > 0

    def alive(self, index: int) -> bool:
        """True from broker ``index``'s first message until it is declared dead (:meth:`expire`, :meth:`lost`)."""
        return index in self._liveness

    def heard(self, index: int, now_s: float) -> bool:
        """Record a message from broker ``index``. Returns True when this brings it (back) to life."""
        self.states[index].last_heard_s = now_s
        return self._liveness.heard(index, now_s)

    def expire(self, now_s: float) -> list[int]:
        """Mark brokers silent for more than ``liveness * interval_s`` s dead. Returns the newly dead indices."""
        return sorted(self._liveness.expired(now_s))

    def lost(self, index: int) -> bool:
        """Mark broker ``index`` dead at once (its connection closed). Returns True if it was alive."""
        return self._liveness.forget(index)

    def heartbeat_due(self, now_s: float) -> bool:
        """True once per ``interval_s`` (and at the first call): time to send a Heartbeat to every broker."""
        if self._last_heartbeat_s is not None and now_s - self._last_heartbeat_s < self.interval_s:
            return False
        self._last_heartbeat_s = now_s
        return True

    def choose(self, avoid: int | None = None, exclude: Iterable[int] = ()) -> int | None:
        """The live broker for the next ROI: fewest in flight, ties round-robin.

        Args:
            avoid: the broker a retried ROI was last sent to; chosen only when no other live broker is left.
            exclude: brokers that cannot take a message right now (their socket refused one this round).

        Returns:
            The broker index, or None when no live broker is available.
        """
        excluded = set(exclude)
        live = [i for i in self._round_robin_order() if self.alive(i) and i not in excluded]
        preferred = [i for i in live if i != avoid] or live
        if not preferred:
            return None
        return min(preferred, key=lambda i: self.states[i].in_flight)

    def probe_target(self, exclude: Iterable[int] = ()) -> int | None:
        """A broker that is not alive and holds nothing of ours, to receive one ROI as a probe; or None.

        A probe lets a broker that only ever answers ROIs (one that sends no heartbeats) be found alive.
        At most one ROI is in flight to a broker that is not alive; if the broker is really gone, that ROI
        times out and is retried like any other.
        """
        excluded = set(exclude)
        for i in self._round_robin_order():
            if not self.alive(i) and self.states[i].in_flight == 0 and i not in excluded:
                return i
        return None

    def sent(self, index: int) -> None:
        """Record one ROI sent to broker ``index`` (and advance the round-robin start)."""
        state = self.states[index]
        state.in_flight += 1
        state.sent += 1
        self._next = (index + 1) % len(self.states)

    def settled(self, index: int) -> None:
        """Record that an ROI sent to broker ``index`` no longer waits on it (answered, retried or dropped)."""
        state = self.states[index]
        state.in_flight = max(0, state.in_flight - 1)

    def _round_robin_order(self) -> list[int]:
        n = len(self.states)
        return [(self._next + k) % n for k in range(n)]


def may_retry(attempt: int, max_attempts: int) -> bool:
    """True when an ROI sent ``attempt + 1`` times so far (``Roi.attempt`` counts from 0) may be sent again.

    ``max_attempts`` counts every send, the first included (``EdgeConfig.max_attempts``).
    """
    return attempt + 1 < max_attempts

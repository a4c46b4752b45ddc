"""The edge's record of one ROI in flight, and how its latency account is closed when the answer arrives
(the output lines are written by :mod:`vcascade.edge.sinks.lines`).

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

from dataclasses import dataclass

from vcascade.core.protocol.wire import Result, Roi


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

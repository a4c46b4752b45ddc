"""The edge's record of one ROI in flight, and how its latency account is closed when the answer arrives.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.protocol.wire import Result, Roi
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.identity_cache import TrackIdentity

RESULT_KIND = "result"
"""``kind`` of the result, drop and ``tracked`` lines (sinks also carry ``event``, ``event_update``, ``camera_state``
records; MQTT topics end in the kind)."""


@dataclass
class PendingRoi:
    """What the edge keeps about an ROI from creation to its result or drop.

    ``roi`` is the header as created (detection, camera, stream timestamp; ``ttl_ms`` is filled in at send
    time; the link replaces it with ``attempt + 1`` before a retry). Times are ``time.perf_counter()`` seconds
    on the edge; ``sent_s`` is set each time it goes on a socket (the last send is the one answered).
    ``send_reason`` is why the ROI policy sent it (``first``, ``refresh``, ``better``, ``every_detection``).
    ``class_name`` is the detector's name for ``roi.class_id`` (None: the COCO name).
    """

    roi: Roi
    capture_s: float
    detect_start_s: float
    detect_end_s: float
    encoded_s: float
    sent_s: float = 0.0
    send_reason: str = ""
    class_name: str | None = None

    @property
    def roi_id(self) -> str:
        return self.roi.roi_id

    @property
    def camera(self) -> str:
        return self.roi.camera

    def base_record(self) -> dict[str, Any]:
        """Fields every output line has, result or drop (``kind: "result"``, :func:`detection_fields` with the ROI's
        id)."""
        roi = self.roi
        return {
            "kind": RESULT_KIND,
            "roi_id": roi.roi_id,
            **detection_fields(
                roi.camera, roi.frame_seq, roi.stream_ts_ms, roi.capture_unix_ms, roi.xyxy, roi.class_id, roi.score,
                roi.track_id, self.class_name,
            ),
            "send_reason": self.send_reason or None,
            "recognizer": roi.recognizer or None,
            "attempt": roi.attempt,
        }


def detection_fields(
    camera: str,
    frame_seq: int,
    stream_ts_ms: float,
    capture_unix_ms: float,
    xyxy: Sequence[float],
    class_id: int,
    score: float,
    track_id: int,
    class_name: str | None = None,
) -> dict[str, Any]:
    """The fields describing one detection in every output line (ROI result, drop, or ``tracked`` line).

    ``xyxy`` is the box in original-frame pixels; times are ms (PTS, and Unix epoch for ``capture_unix_ms``);
    ``track_id`` is -1 for a detection without a confirmed track; ``class_name`` is the detector's name for
    ``class_id`` (None: looked up among the 80 COCO names, the default class list).
    """
    if class_name is None:
        class_name = COCO_CLASSES[class_id] if 0 <= class_id < len(COCO_CLASSES) else str(class_id)
    return {
        "camera": camera,
        "frame_seq": frame_seq,
        "stream_ts_ms": round(stream_ts_ms, 3),
        "capture_unix_ms": round(capture_unix_ms, 3),
        "bbox_xyxy": [round(float(v), 2) for v in xyxy],
        "class_id": class_id,
        "class_name": class_name,
        "score": round(score, 4),
        "track_id": track_id,
    }


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


def result_record(pending: PendingRoi, result: Result, received_s: float) -> dict[str, Any]:
    """The output line for an ROI that got a result."""
    return {
        **pending.base_record(),
        "status": "ok",
        "worker": result.worker,
        **head_fields(result),
        "latency_ms": close_account(pending, result, received_s),
    }


HEAD_FIELD_DECIMALS = 4
"""Decimals kept of the head output's float fields (similarities, scores) in output lines."""


def head_fields(result: Result) -> dict[str, Any]:
    """The fields of the result's head output, by field name, for the result line (nothing when the result has
    no output): the embedding head's ``identity_id``, ``similarity``, ``enrolled``; the classifier's ``labels``/
    ``label_scores``; the text head's ``text``/``text_score`` (``''`` when nothing was read). Written generically
    from the output struct's fields (:data:`vcascade.core.protocol.wire.HEAD_OUTPUTS`): tuples as lists, floats rounded to
    :data:`HEAD_FIELD_DECIMALS` decimals; the ``head`` tag is not written (``recognizer`` names the recognizer)."""
    output = result.output
    if output is None:
        return {}
    return {field.name: _line_value(getattr(output, field.name)) for field in msgspec.structs.fields(output)}


def _line_value(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, HEAD_FIELD_DECIMALS)
    if isinstance(value, (tuple, list)):
        return [_line_value(item) for item in value]
    return value


def drop_record(pending: PendingRoi, reason: str, where: str) -> dict[str, Any]:
    """The output line for an ROI that ended without a result (counted drop)."""
    return {**pending.base_record(), "status": "dropped", "reason": reason, "where": where}



def tracked_record(
    frame: Frame,
    xyxy: Sequence[float],
    class_id: int,
    score: float,
    track_id: int,
    identity: TrackIdentity | None,
    class_name: str | None = None,
) -> dict[str, Any]:
    """The output line for a followed detection that was not sent (``status: "tracked"``; not an ROI).

    It carries the track's last identity (``identity_id``/``similarity``/``identity_roi_id``: the ROI whose
    result gave it; ``identity_id`` -1 when a head other than the embedding head gave it) and the other head
    fields of that result (``TrackIdentity.extra``), or nulls when no result for the track has arrived yet.
    ``roi_id`` is null: these lines are outside the ``sent = results + drops`` account.
    """
    return {
        "kind": RESULT_KIND,
        "roi_id": None,
        **detection_fields(
            frame.camera, frame.seq, frame.stream_ts_ms, frame.capture_unix_ms, xyxy, class_id, score, track_id,
            class_name,
        ),
        "status": "tracked",
        "identity_id": None if identity is None else identity.identity_id,
        "similarity": None if identity is None else round(identity.similarity, 4),
        "identity_roi_id": None if identity is None else identity.roi_id,
        **({} if identity is None else identity.extra),
    }

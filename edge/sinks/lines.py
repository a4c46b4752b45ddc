"""The output lines: the one place where the way back's typed events (:mod:`vcascade.edge.way_back`) become the
records the sinks write, and the only edge module besides the head output types that names a head's fields.

Every line has a ``kind`` (docs/SINKS.md, docs/EVENTS.md): ``result`` (an ROI's result, ``status: ok``; its drop,
``status: dropped``; a followed detection not sent, ``status: tracked``), ``event``, ``event_update``,
``camera_state``. A head's answer is written generically from its output struct's fields
(:data:`vcascade.core.protocol.wire.HEAD_OUTPUTS`), by their names, as top-level keys of the result line: tuples as
lists, floats rounded to :data:`HEAD_FIELD_DECIMALS` decimals.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.protocol.wire import HeadOutput
from vcascade.core.redact import redact_url
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.selection.identity_cache import TrackIdentity
from vcascade.edge.way_back import (
    Answered, CameraStateChanged, Dropped, EventRaised, EventUpdated, Tracked, WayBackEvent,
)

log = logging.getLogger(__name__)

RESULT_KIND = "result"
"""``kind`` of the result, drop and ``tracked`` lines (MQTT topics end in the kind)."""
HEAD_FIELD_DECIMALS = 4
"""Decimals kept of the head output's float fields (similarities, scores) in output lines."""
IDENTITY_FIELDS = ("identity_id", "similarity")
"""The embedding head's fields a ``tracked`` line always has (-1 and 0.0 for another head's answer, null before
the track's first answer)."""


def line(event: WayBackEvent) -> dict[str, Any]:
    """The output line of one event (a JSON-serialisable dict).

    Raises:
        TypeError: not one of :data:`vcascade.edge.way_back.WayBackEvent`.
    """
    if isinstance(event, Answered):
        return result_line(event)
    if isinstance(event, Dropped):
        return {**_roi_fields(event.pending), "status": "dropped", "reason": event.reason, "where": event.where}
    if isinstance(event, Tracked):
        return tracked_line(event)
    if isinstance(event, EventRaised):
        return event_line(event)
    if isinstance(event, EventUpdated):
        return {
            "kind": "event_update", "event_id": event.event_id, "camera": event.camera, "track_id": event.track_id,
            **_event_identity(event.identity), "roi_id": event.identity.roi_id,
            "stream_ts_ms": round(event.identity.stream_ts_ms, 3),
        }
    if isinstance(event, CameraStateChanged):
        step = event.step  # ``state``: the state entered; ``detail`` with credentials redacted (again: any
        # Transition, not only the state machine's, reaches the sinks through here)
        return {"kind": "camera_state", "camera": event.camera, "state": step.target, "reason": step.reason,
                "detail": redact_url(step.detail), "wall_ts_ms": round(step.wall_ts_ms, 3)}  # fmt: skip
    raise TypeError(f"no output line for {type(event).__name__}")


def result_line(event: Answered) -> dict[str, Any]:
    """The line of an ROI that got a result: the ROI's fields, ``status: ok``, the worker, the head's fields
    (:func:`head_fields`) and the latency account (``latency_ms``, ms per hop)."""
    return {
        **_roi_fields(event.pending), "status": "ok", "worker": event.result.worker,
        **head_fields(event.result.output), "latency_ms": event.latency_ms,
    }


def head_fields(output: HeadOutput | None) -> dict[str, Any]:
    """The fields of a head output, by field name (nothing for None): the embedding head's ``identity_id``,
    ``similarity``, ``enrolled``, ...; the classifier's ``labels``/``label_scores``; the text head's
    ``text``/``text_score`` and ``texts`` (each region's ``text``, ``text_score``, ``box``, ``detection_score``).
    The ``head`` tag is not written (``recognizer`` names the recognizer)."""
    if output is None:
        return {}
    return {field.name: _line_value(getattr(output, field.name)) for field in msgspec.structs.fields(output)}


def tracked_line(event: Tracked) -> dict[str, Any]:
    """The line of a followed detection that was not sent (``status: "tracked"``; not an ROI: ``roi_id`` null,
    outside the ``sent = results + drops`` account). It carries the track's last answer: ``identity_id``,
    ``similarity`` (-1 and 0.0 when another head gave it), ``identity_roi_id`` (the ROI answered) and the answer's
    other head fields, or nulls before the track's first answer."""
    identity = event.identity
    fields = {} if identity is None else head_fields(identity.output)
    return {
        "kind": RESULT_KIND, "roi_id": None,
        **detection_fields(
            event.camera, event.frame_seq, event.stream_ts_ms, event.capture_unix_ms, event.xyxy, event.class_id,
            event.score, event.track_id, event.class_name,
        ),
        "status": "tracked",
        "identity_id": None if identity is None else fields.pop("identity_id", -1),
        "similarity": None if identity is None else round(fields.pop("similarity", 0.0), HEAD_FIELD_DECIMALS),
        "identity_roi_id": None if identity is None else identity.roi_id,
        **fields,
    }


def event_line(raised: EventRaised) -> dict[str, Any]:
    """The line of a line or zone event (docs/EVENTS.md) with the identity (or text) its track had when it fired
    (nulls when none: an ``event_update`` follows)."""
    event = raised.event
    place = "line" if event.type == "line_cross" else "zone"
    record: dict[str, Any] = {
        "kind": "event", "event_id": raised.event_id, "type": event.type, "camera": raised.camera,
        place: event.place,
    }
    if event.direction is not None:
        record["direction"] = event.direction
    record.update({
        "class": event.class_name, "track_id": event.track_id, **_event_identity(raised.identity),
        "stream_ts_ms": round(event.stream_ts_ms, 3), "capture_ts_ms": round(event.capture_unix_ms, 3),
    })
    if event.dwell_s is not None:
        record["dwell_s"] = event.dwell_s
    if event.type == "zone_exit":
        record["track_lost"] = event.track_lost
    return record


def detection_fields(
    camera: str, frame_seq: int, stream_ts_ms: float, capture_unix_ms: float, xyxy: Sequence[float], class_id: int,
    score: float, track_id: int, class_name: str | None = None,
) -> dict[str, Any]:
    """The fields describing one detection in every result, drop and ``tracked`` line.

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


def _roi_fields(pending: PendingRoi) -> dict[str, Any]:
    """Fields every result and drop line has (``kind: "result"``, the ROI's id, :func:`detection_fields`)."""
    roi = pending.roi
    return {
        "kind": RESULT_KIND,
        "roi_id": roi.roi_id,
        **detection_fields(
            roi.camera, roi.frame_seq, roi.stream_ts_ms, roi.capture_unix_ms, roi.xyxy, roi.class_id, roi.score,
            roi.track_id, pending.class_name,
        ),
        "send_reason": pending.send_reason or None,
        "recognizer": roi.recognizer or None,
        "attempt": roi.attempt,
    }


def _event_identity(identity: TrackIdentity | None) -> dict[str, Any]:
    """``identity_id`` (the gallery identity; null without one) and ``text`` (the text read; null when not a text
    head) of an event or event update."""
    if identity is None:
        return {"identity_id": None, "text": None}
    return {"identity_id": identity.gallery_identity(), "text": identity.read_text()}


def _line_value(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):  # e.g. a text region: its fields by name
        return {field.name: _line_value(getattr(value, field.name)) for field in msgspec.structs.fields(value)}
    if isinstance(value, float):
        return round(value, HEAD_FIELD_DECIMALS)
    if isinstance(value, (tuple, list)):
        return [_line_value(item) for item in value]
    return value


class OutputLines:
    """The last consumer of the way back: formats each event into its line (:func:`line`) and hands it to every
    sink. A sink never blocks and never raises here (a queued sink only appends to its queue,
    :class:`vcascade.edge.sinks.queue.QueuedSink`); one that does is logged, and the others still get the line.

    Args:
        sinks: objects with ``write(line: dict)`` (the edge's queued sinks; a test's list).
    """

    def __init__(self, sinks: Sequence[Any]) -> None:
        self.sinks = list(sinks)

    def write(self, event: WayBackEvent) -> None:
        """Write the line of ``event`` to every sink (any thread for a camera state, else the link thread)."""
        record = line(event)
        for sink in self.sinks:
            try:
                sink.write(record)
            except Exception:  # a failing sink must not stop the others or the accounting
                log.exception("sink %s failed", type(sink).__name__)

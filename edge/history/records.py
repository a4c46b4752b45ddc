"""What the history store keeps, as plain records built from the way back's events (no I/O, no clock).

One :class:`Sighting` per result with status ok (:class:`~vcascade.edge.way_back.Answered`) and per line or zone
event (:class:`~vcascade.edge.way_back.EventRaised`); one :class:`IdentityLearned` when an event raised before its
track's first answer gets it (:class:`~vcascade.edge.way_back.EventUpdated`); one :class:`CameraStateRecord` per
camera state change. Drops and ``tracked`` detections are not kept (the sinks and metrics have them).

Identities are read through the head outputs' accessors, never a head's field names: ``gallery_identity()`` (a
store id), ``provisional_identity()`` (a worker-local id, < 0) and ``identity_merges()`` (ids merged into the
answered one), so a query for an identity follows its merges (docs/HISTORY.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from vcascade.core.protocol.wire import HeadOutput
from vcascade.edge.history.event_frame import EventFrame
from vcascade.edge.way_back import Answered, CameraStateChanged, EventRaised, EventUpdated, WayBackEvent

KINDS = ("result", "event", "event_update", "camera_state")
"""``kind`` label of the history metrics, one per record type."""


@dataclass
class Sighting:
    """One row of the history: a result (``kind='result'``) or a line or zone event (``kind='event'``).

    Times: ``capture_unix_ms`` ms since the Unix epoch (the frame's capture at the edge), ``stream_ts_ms`` the
    frame's PTS in ms. ``identity``: the gallery id (>= 0), a result's provisional id (< 0, local to ``worker``), or
    None (an event keeps gallery ids only: its track's answer does not say which worker gave it).
    ``text``: what a text head read (None: no reading). ``label``: a classifier's top label. ``ref``: the ROI's or
    the event's id (unique). ``crop_jpeg``: the ROI crop the edge encoded (None: no crop evidence), made by the
    redaction step for the ``roi`` exit, ``crop_redacted`` whether its faces were redacted;
    ``frame``: an event's picture (None: none taken).
    """

    kind: str
    ref: str
    edge: str
    camera: str
    capture_unix_ms: float
    stream_ts_ms: float
    track_id: int
    class_name: str
    identity: int | None = None
    worker: str = ""
    text: str | None = None
    label: str | None = None
    event_type: str | None = None
    place: str | None = None
    direction: str | None = None
    dwell_s: float | None = None
    merged_from: tuple[int, ...] = ()
    crop_jpeg: bytes | None = None
    crop_redacted: bool = False
    frame: EventFrame | None = field(default=None, repr=False)

    @property
    def wants_evidence(self) -> bool:
        """Evidence is kept for every event and every result with an identity or a text reading."""
        return self.kind == "event" or self.identity is not None or bool(self.text)


@dataclass(frozen=True)
class IdentityLearned:
    """The event ``event_id`` got its track's identity (and text) after it was raised."""

    event_id: str
    camera: str
    identity: int | None
    text: str | None

    kind = "event_update"


@dataclass(frozen=True)
class CameraStateRecord:
    """A camera entered ``state`` at ``wall_ts_ms`` (ms since the Unix epoch) for ``reason``."""

    edge: str
    camera: str
    wall_ts_ms: float
    source: str
    state: str
    reason: str

    kind = "camera_state"


Record = Union[Sighting, IdentityLearned, CameraStateRecord]


def identity_of(output: HeadOutput | None) -> int | None:
    """The answer's identity: its gallery id, else its provisional id (< 0), else None."""
    if output is None:
        return None
    gallery = output.gallery_identity()
    return gallery if gallery is not None else output.provisional_identity()


def record_of(edge: str, event: WayBackEvent) -> Record | None:
    """The record ``event`` becomes (None: not kept)."""
    if isinstance(event, Answered):
        return _answered(edge, event)
    if isinstance(event, EventRaised):
        return _raised(edge, event)
    if isinstance(event, EventUpdated):
        known = event.identity
        return IdentityLearned(event.event_id, event.camera, known.gallery_identity(), known.read_text())
    if isinstance(event, CameraStateChanged):
        step = event.step
        return CameraStateRecord(edge, event.camera, step.wall_ts_ms, step.source, step.target, step.reason)
    return None


def _answered(edge: str, event: Answered) -> Sighting:
    roi, output = event.roi, event.result.output
    return Sighting(
        kind="result", ref=roi.roi_id, edge=edge, camera=roi.camera, capture_unix_ms=roi.capture_unix_ms,
        stream_ts_ms=roi.stream_ts_ms, track_id=roi.track_id, class_name=event.pending.class_name or str(roi.class_id),
        identity=identity_of(output), worker=event.result.worker,
        text=None if output is None else output.read_text(),
        label=None if output is None else output.short_label(),
        merged_from=() if output is None else output.identity_merges(),
        crop_jpeg=event.crop_jpeg, crop_redacted=event.pending.redacted,
    )


def _raised(edge: str, event: EventRaised) -> Sighting:
    ev, known = event.event, event.identity
    return Sighting(
        kind="event", ref=event.event_id, edge=edge, camera=event.camera, capture_unix_ms=ev.capture_unix_ms,
        stream_ts_ms=ev.stream_ts_ms, track_id=ev.track_id, class_name=ev.class_name,
        identity=None if known is None else known.gallery_identity(),
        text=None if known is None else known.read_text(),
        event_type=ev.type, place=ev.place, direction=ev.direction, dwell_s=ev.dwell_s, frame=event.frame,
    )

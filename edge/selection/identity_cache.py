"""The identity last recognised for each live track, so that later detections of it need no round trip.

Filled from results: :class:`IdentityCache` is a :class:`~edge.sinks.registry.Sink` that the broker link writes every
finished record to (on the link thread); read by the detector thread when it writes ``tracked`` lines.
Bounded: only tracks the camera's tracker still keeps are stored (:meth:`IdentityCache.retain`), so a result
for a track that expired meanwhile is ignored.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from vcascade.core.protocol.wire import HEAD_OUTPUTS
from vcascade.edge.metrics import EdgeTelemetry


@dataclass(frozen=True)
class TrackIdentity:
    """A track's last recognition result.

    Attributes:
        identity_id: gallery identity from the center (-1 when the head is not an embedding head).
        similarity: cosine similarity to that identity, -1..1.
        roi_id: the ROI whose result this is.
        stream_ts_ms: PTS of that ROI's frame, ms (a result for an older crop never replaces a newer one).
        extra: that result's other head fields (:data:`EXTRA_FIELDS` present in its line: ``enrolled``,
            ``text``/``text_score``, ``labels``/``label_scores``, ...), repeated on the track's ``tracked`` lines.
    """

    identity_id: int
    similarity: float
    roi_id: str
    stream_ts_ms: float
    extra: dict[str, Any] = field(default_factory=dict)


IDENTITY_FIELDS = ("identity_id", "similarity")
"""Result-line fields a ``tracked`` line always has (null before the track's first result)."""

EXTRA_FIELDS = tuple(dict.fromkeys(
    field for output in HEAD_OUTPUTS for field in output.__struct_fields__ if field not in IDENTITY_FIELDS
))
"""The other head-output fields of result lines (every head's, edge/link/account.py ``head_fields``) kept per track."""


class IdentityCache:
    """Per-camera ``track_id -> TrackIdentity``; thread-safe. Implements the :class:`~edge.sinks.registry.Sink` protocol."""

    def __init__(self, edge: str) -> None:
        self.edge = edge
        self.telemetry = EdgeTelemetry(edge)
        self._lock = threading.Lock()
        self._alive: dict[str, set[int]] = {}
        self._identities: dict[str, dict[int, TrackIdentity]] = {}

    def write(self, record: dict[str, Any]) -> None:
        """Take the identity from a result record (``status: "ok"`` with ``track_id >= 0``); ignore others.
        A result of a non-embedding head has identity -1 and keeps its own fields in ``extra``.

        A record without the expected fields is counted (``vcascade_edge_malformed_messages_total`` with
        reason ``bad_record``) and ignored.
        """
        if record.get("status") != "ok":
            return
        try:
            camera, track_id = str(record["camera"]), int(record.get("track_id", -1))
            entry = TrackIdentity(
                int(record.get("identity_id", -1)), float(record.get("similarity", 0.0)), str(record["roi_id"]),
                float(record["stream_ts_ms"]), {k: record[k] for k in EXTRA_FIELDS if k in record},
            )
        except (KeyError, TypeError, ValueError):
            self.telemetry.malformed("bad_record")
            return
        if track_id < 0:
            return
        with self._lock:
            if track_id not in self._alive.get(camera, ()):
                return
            cached = self._identities.setdefault(camera, {})
            previous = cached.get(track_id)
            if previous is None or entry.stream_ts_ms >= previous.stream_ts_ms:
                cached[track_id] = entry

    def close(self) -> None:
        """Nothing to release (Sink protocol)."""

    def get(self, camera: str, track_id: int) -> TrackIdentity | None:
        """The track's last identity, or None when no result for it has arrived yet."""
        with self._lock:
            return self._identities.get(camera, {}).get(track_id)

    def retain(self, camera: str, alive_track_ids: set[int]) -> None:
        """Set the camera's live tracks (from its tracker); identities of the others are forgotten."""
        alive = set(alive_track_ids)
        with self._lock:
            self._alive[camera] = alive
            cached = self._identities.get(camera)
            if cached:
                for track_id in [t for t in cached if t not in alive]:
                    del cached[track_id]

    def size(self, camera: str) -> int:
        """Number of identities held for a camera."""
        with self._lock:
            return len(self._identities.get(camera, {}))

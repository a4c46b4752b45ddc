"""The identity last recognised for each live track, so that later detections of it need no round trip.

Filled from answers: the way back (:class:`vcascade.edge.way_back.WayBack`) hands :meth:`IdentityCache.remember`
every ROI answered, first of its subscribers (on the link thread); read by the detector thread when it writes
``tracked`` lines and raises events, and by the preview. Bounded: only tracks the camera's tracker still keeps are
stored (:meth:`IdentityCache.retain`), so an answer for a track that expired meanwhile is ignored.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from vcascade.core.protocol.wire import HeadOutput, Roi


@dataclass(frozen=True)
class TrackIdentity:
    """A track's last recognition answer.

    Attributes:
        output: the head's answer (one of :data:`vcascade.core.protocol.wire.HEAD_OUTPUTS`; None: an answer without
            a head output). Read through its accessors (``gallery_identity()``, ``read_text()``, ...).
        roi_id: the ROI whose answer this is.
        stream_ts_ms: PTS of that ROI's frame, ms (an answer for an older crop never replaces a newer one).
        recognizer: the recognizer that answered (the ROI's ``recognizer``).
    """

    output: HeadOutput | None
    roi_id: str
    stream_ts_ms: float
    recognizer: str = ""

    def gallery_identity(self) -> int | None:
        """The gallery identity of the answer (>= 0), None without one (another head, or provisional)."""
        return None if self.output is None else self.output.gallery_identity()

    def read_text(self) -> str | None:
        """The text the answer read (``''``: nothing), None when its head reads none."""
        return None if self.output is None else self.output.read_text()

    def short_label(self) -> str | None:
        """The answer's label for a preview box, None: nothing to show."""
        return None if self.output is None else self.output.short_label()


class IdentityCache:
    """Per-camera ``track_id -> TrackIdentity``; thread-safe."""

    def __init__(self, edge: str) -> None:
        self.edge = edge
        self._lock = threading.Lock()
        self._alive: dict[str, set[int]] = {}
        self._identities: dict[str, dict[int, TrackIdentity]] = {}

    def remember(self, roi: Roi, output: HeadOutput | None) -> None:
        """Keep the answer ``output`` for the ROI ``roi`` as its track's identity (link thread). Ignored for an
        untracked ROI (``track_id`` -1), a track no longer alive, or an answer older (by stream time) than the
        one kept; between two text readings the surer one is kept whatever their times (a track keeps its best
        reading: a plate read well once is not replaced by a later blurred look)."""
        if roi.track_id < 0:
            return
        entry = TrackIdentity(output, roi.roi_id, roi.stream_ts_ms, roi.recognizer)
        with self._lock:
            if roi.track_id not in self._alive.get(roi.camera, ()):
                return
            cached = self._identities.setdefault(roi.camera, {})
            previous = cached.get(roi.track_id)
            if previous is None or _better(entry, previous):
                cached[roi.track_id] = entry

    def get(self, camera: str, track_id: int) -> TrackIdentity | None:
        """The track's last identity, or None when no answer for it has arrived yet."""
        with self._lock:
            return self._identities.get(camera, {}).get(track_id)

    def gallery_identity(self, camera: str, track_id: int, recognizer: str) -> int:
        """The gallery identity (>= 1) ``recognizer``'s latest kept answer gave the track, -1 when there is none
        (no answer yet, another recognizer's, provisional, untracked): what a new ROI of the track carries."""
        entry = self.get(camera, track_id) if track_id >= 0 else None
        identity = None if entry is None or entry.recognizer != recognizer else entry.gallery_identity()
        return -1 if identity is None else identity

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


def _better(new: TrackIdentity, kept: TrackIdentity) -> bool:
    """Whether ``new`` replaces ``kept``: the surer of two text readings (``reading_score``; a tie: the newer),
    else the newer answer by stream time."""
    new_score = None if new.output is None else new.output.reading_score()
    kept_score = None if kept.output is None else kept.output.reading_score()
    if new_score is not None and kept_score is not None and new_score != kept_score:
        return new_score > kept_score
    return new.stream_ts_ms >= kept.stream_ts_ms

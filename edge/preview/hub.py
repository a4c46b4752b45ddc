"""On-demand annotated previews of an edge's cameras for the live view (``ui:``, vcascade/app/ui/).

Cost only when watched: nothing is drawn or encoded for a camera until someone asks for its preview
(:meth:`PreviewHub.watch`, called by the preview endpoint, :mod:`vcascade.edge.preview.server`). From then on,
for ``ui.watch_lease_s`` after the last request, the edge's loop thread draws and JPEG-encodes at most
``ui.preview_fps`` previews per second of that camera, at most ``ui.preview_width_px`` wide
(:mod:`vcascade.edge.preview.annotate`), and the hub keeps that camera's last ``ui.recent_results`` result lines and
events. A camera nobody watches costs one dictionary look-up per frame and per result line.

Threads: the loop thread calls :meth:`PreviewHub.due` and :meth:`PreviewHub.offer`; the link thread hands it the
way back's events (:meth:`PreviewHub.take`, :class:`vcascade.edge.way_back.WayBack`), kept as they are and formatted
into lines (:mod:`vcascade.edge.sinks.lines`) only when asked for; HTTP threads call
:meth:`PreviewHub.watch`, :meth:`PreviewHub.latest` and :meth:`PreviewHub.recent`. One lock guards the maps.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vcascade.core.config import UiConfig
from vcascade.core.detections import Detections
from vcascade.edge.preview.annotate import NO_GEOMETRY, Geometry, annotate
from vcascade.edge.privacy.redaction import RedactedFrame, RedactedImage, require_redacted
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.sinks.lines import line
from vcascade.edge.way_back import Answered, Dropped, EventRaised, WayBackEvent

PREVIEW_JPEG_QUALITY = 80
"""JPEG quality of previews (a preview is for eyes, not for recognition)."""


@dataclass(frozen=True)
class Preview:
    """The latest annotated frame of one camera.

    Attributes:
        image: the JPEG, at most ``preview_width_px`` wide, as the redaction step made it
            (:class:`~vcascade.edge.privacy.redaction.RedactedImage`, exit ``preview``).
        frame_seq: the frame's index in its camera.
        stream_ts_ms: the frame's PTS, ms.
        encoded_unix_ms: wall-clock time of the encoding, ms since the Unix epoch.
        boxes_xyxy_px: the boxes drawn, x1, y1, x2, y2 in preview pixels (rounded), one tuple per box.
    """

    image: RedactedImage
    frame_seq: int
    stream_ts_ms: float
    encoded_unix_ms: float
    boxes_xyxy_px: tuple[tuple[int, int, int, int], ...]


class PreviewHub:
    """Previews and recent lines of the watched cameras of one edge.

    Args:
        ui: the ``ui:`` section (rate, width, lease, how many recent lines).
        class_names: the detector's class names, by class id.
        identities: the edge's track identity cache (the identity or text drawn next to a track).
    """

    def __init__(self, ui: UiConfig, class_names: Sequence[str], identities: IdentityCache) -> None:
        self.ui, self.class_names, self.identities = ui, class_names, identities
        self.interval_s = 1.0 / ui.preview_fps
        self._lock = threading.Lock()
        self._watched_until_s: dict[str, float] = {}
        self._next_due_s: dict[str, float] = {}
        self._latest: dict[str, Preview] = {}
        self._results: dict[str, deque[Answered | Dropped]] = {}
        self._events: dict[str, deque[EventRaised]] = {}
        self.encoded: dict[str, int] = {}

    # ------------------------------------------------------------ viewers (HTTP threads)

    def watch(self, camera: str) -> None:
        """Someone views ``camera``: encode its previews for the next ``watch_lease_s`` seconds."""
        with self._lock:
            self._watched_until_s[camera] = time.monotonic() + self.ui.watch_lease_s

    def watching(self, camera: str) -> bool:
        """Whether ``camera``'s lease is running."""
        return self._watched_until_s.get(camera, 0.0) > time.monotonic()

    def latest(self, camera: str) -> Preview | None:
        """The camera's latest preview (None before the first one)."""
        with self._lock:
            return self._latest.get(camera)

    def recent(self, camera: str) -> dict[str, list[dict[str, Any]]]:
        """The camera's recent ``results`` (result and drop lines, oldest first) and ``events``."""
        with self._lock:
            results, events = list(self._results.get(camera, ())), list(self._events.get(camera, ()))
        return {"results": [line(event) for event in results], "events": [line(event) for event in events]}

    # ------------------------------------------------------------ the loop thread

    def due(self, camera: str, now_s: float) -> bool:
        """Whether a frame of ``camera`` taken at ``now_s`` (``time.monotonic()``) should become a preview: the
        camera is watched and its last preview is at least ``1 / preview_fps`` old."""
        return self._next_due_s.get(camera, 0.0) <= now_s < self._watched_until_s.get(camera, 0.0)

    def offer(
        self, redacted: RedactedFrame, detections: Detections, now_s: float, geometry: Geometry = NO_GEOMETRY
    ) -> Preview:
        """Draw and encode the preview of a frame on its way out (:mod:`vcascade.edge.privacy.redaction`: its
        masks filled, its faces redacted when the camera's ``privacy.faces.exits`` holds ``preview``) with its
        tracked ``detections`` and its camera's lines and zones
        (:func:`vcascade.edge.preview.annotate.camera_geometry`); it becomes the latest.

        Raises:
            TypeError: ``redacted`` is not a :class:`~vcascade.edge.privacy.redaction.RedactedFrame`.
            ValueError: the JPEG encoder refused the image.
        """
        if not isinstance(redacted, RedactedFrame):
            raise TypeError(f"previews are made only of a RedactedFrame, got {type(redacted).__name__}")
        frame = redacted.frame
        self._next_due_s[frame.camera] = now_s + self.interval_s
        labels = [self._label(frame.camera, detections, row) for row in range(len(detections))]
        width = self.ui.preview_width_px
        image = redacted.render(
            "preview", lambda pixels: annotate(pixels, detections, labels, width, geometry), PREVIEW_JPEG_QUALITY
        )
        scale = min(1.0, width / frame.image.shape[1])
        boxes = tuple(tuple(round(float(v) * scale) for v in box) for box in detections.xyxy)
        image = require_redacted(image, "preview")
        preview = Preview(image, frame.seq, frame.stream_ts_ms, time.time() * 1000.0, boxes)
        with self._lock:
            self._latest[frame.camera] = preview
            self.encoded[frame.camera] = self.encoded.get(frame.camera, 0) + 1
        return preview

    def _label(self, camera: str, detections: Detections, row: int) -> str:
        """``class score #track`` and, once the centre answered for the track, its identity or text."""
        class_id, track_id = int(detections.class_id[row]), int(detections.track_id[row])
        name = self.class_names[class_id] if 0 <= class_id < len(self.class_names) else str(class_id)
        text = f"{name} {float(detections.score[row]):.2f}"
        if track_id < 0:
            return text
        text += f" #{track_id}"
        known = self.identities.get(camera, track_id)
        answer = None if known is None else known.short_label()
        return f"{text} {answer}" if answer else text

    def forget(self, camera: str) -> None:
        """Drop a removed camera's preview, lease and lines."""
        with self._lock:
            for table in (self._watched_until_s, self._next_due_s, self._latest, self._results, self._events):
                table.pop(camera, None)

    # ------------------------------------------------------------ the link thread (the way back)

    def take(self, event: WayBackEvent) -> None:
        """Keep an answer, a drop or an event of a watched camera; other events (``tracked`` detections: a track's
        cached identity repeated at frame rate, already drawn on the preview), and those of unwatched cameras, are
        ignored."""
        if isinstance(event, (Answered, Dropped)):
            table: dict[str, deque] = self._results
        elif isinstance(event, EventRaised):
            table = self._events
        else:
            return
        if not self.watching(event.camera):
            return
        with self._lock:
            table.setdefault(event.camera, deque(maxlen=self.ui.recent_results)).append(event)

"""Which tracked detections become ROIs, and why the others are not sent (pure logic, no I/O).

Policy ``track`` (the default) sends each track's crop once, then again only when it is worth a new round
trip to the center:

* **first**: the track is confirmed (the tracker gave it an id) and was never sent;
* **refresh**: ``refresh_s`` or more of stream time (PTS) passed since its last sent crop (``refresh_s: 0``
  never refreshes);
* **better**: a clearly better crop than the last one sent. With ``A``/``s`` the box area (px^2) and score of
  the last sent crop, a detection of area ``a`` and score ``t`` is better when

      larger:  a >= better_area_ratio * A  and  t >= s                      (closer or more of it in view)
      surer:   t >= s + better_score_margin  and  a >= A                    (less occluded or blurred)

  Requiring the other measure not to get worse keeps a growing but blurring box (or a sure but shrinking
  one) from being resent on every frame.

Policy ``every_detection`` sends every detection that passes the filters (the behaviour before tracking).

Filters, in order, for both policies: ``classes`` (reason ``class``), box size (``size``: narrower or shorter
than ``roi.min_size_px``, wider or higher than ``max_size_px``, or wholly outside the frame, so that nothing is
left to crop), ``min_score`` (``score``) and, with a
router, the camera's routes (``no_route``: no route takes the class, :class:`ClassRouter`). Detections
that pass them but are not sent are suppressed as ``tentative`` (no confirmed track yet; ByteTrack confirms a
track on its second match at the earliest) or ``sent_recently`` (the track was sent and nothing calls for a
new crop). While the brokers report a backlog, sends are shed in a fixed order (``refresh``, then ``better``,
then ``every_detection``; never ``first``) and suppressed as ``backlog`` without being recorded as sent, so
the track is sent again once the backlog clears (:mod:`vcascade.edge.selection.degrade`). Those three kinds are
*followed*: the edge writes a ``tracked`` line for them with the track's last identity
(:data:`~vcascade.edge.selection.roi_selection.FOLLOWED_REASONS`); filtered detections are not objects of interest and
get no line.

The policy's answer for a frame is one :class:`~vcascade.edge.selection.roi_selection.RoiSelection`: the detections sent,
with their reasons, recognizers and crop rectangles (``roi.padding_px`` on each side, clamped to the frame), and
the detections suppressed, with their reasons. The minimum size is applied here only: the crop step
(:mod:`vcascade.edge.selection.roi`) takes the selection as it is.

**Routes** (:class:`ClassRouter`): which recognizer a detection's ROI is for, by class, first match wins.
A deployment may run several recognizers at once (an appearance embedder for people and bikes, a text
recognizer for vehicles), each in its own workers. The edge names the recognizer on every ROI
(``wire.Roi.recognizer``) and the broker gives the ROI only to a worker announcing that recognizer (the
Majordomo pattern, ZeroMQ Guide ch. 4: requests name a service). Routes come from the config
(``edges.<name>.roi.routes``, overridden per camera by ``cameras.<name>.routes``; without routes every ROI goes
to the one recognizer the edge's brokers serve, :meth:`vcascade.core.schema.Deployment.routes_of`):

* a route with ``classes`` takes those detector classes; a route without takes every class left;
* a class no route takes is not sent (the ROI policy suppresses it as ``no_route``);
* a track keeps the recognizer of its first routed detection, even if the detector later gives it another
  class (ByteTrack is class-agnostic): one track, one recognizer, so its identity comes from one model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.config import RoiPolicyConfig, RouteConfig
from vcascade.core.detections import Detections
from vcascade.edge.selection.degrade import sheds
from vcascade.edge.selection.roi_selection import SENT_REASONS, RoiSelection, crop_boxes

SCORE_EPS = 1e-6
"""Tolerance on score comparisons: scores are float32 (0.8 + 0.15 must reach 0.95)."""


@dataclass(frozen=True)
class SentCrop:
    """What the policy remembers of a track's last sent crop: stream time (ms), box area (px^2), score."""

    stream_ts_ms: float
    area_px2: float
    score: float


class RoiPolicy:
    """ROI policy state of one camera: the last sent crop of each live track.

    Not thread-safe: one instance per camera, used from the detector thread. State is bounded by the tracker:
    call :meth:`retain` with the tracker's live ids each frame.
    """

    def __init__(
        self, cfg: RoiPolicyConfig, min_size_px: int, padding_px: int, router: ClassRouter | None = None
    ) -> None:
        """``min_size_px``: the edge's ``roi.min_size_px`` (boxes narrower or shorter are filtered as ``size``);
        ``padding_px``: the edge's ``roi.padding_px`` (pixels added on each side of a box to crop it);
        ``router``: the camera's routes (None: every ROI for any recognizer)."""
        self.cfg = cfg
        self.min_size_px = min_size_px
        self.padding_px = padding_px
        self.router = router
        self._class_ids = None if cfg.classes is None else frozenset(COCO_CLASSES.index(c) for c in cfg.classes)
        self._sent: dict[int, SentCrop] = {}

    def decide(
        self, detections: Detections, stream_ts_ms: float, frame_hw: tuple[int, int], shed_level: int = 0
    ) -> RoiSelection:
        """The frame's :class:`RoiSelection`: each row sent or suppressed, with its reason; records the crops it
        decides to send.

        Args:
            detections: the frame's detections with ``track_id`` set (-1: no confirmed track), boxes in
                original-frame pixels.
            stream_ts_ms: the frame's PTS, ms.
            frame_hw: (height, width) of the frame, px: crop rectangles are padded boxes clamped to it.
            shed_level: sends stopped while the brokers report a backlog (:func:`vcascade.edge.selection.degrade.sheds`).
        """
        crop_xyxy = crop_boxes(detections.xyxy, frame_hw, self.padding_px)
        verdicts = [self._verdict(detections, i, crop_xyxy[i], stream_ts_ms, shed_level)
                    for i in range(len(detections))]  # fmt: skip
        reasons = np.array([reason for reason, _ in verdicts], dtype=str)
        recognizers = np.array([recognizer for _, recognizer in verdicts], dtype=str)
        sent = np.isin(reasons, SENT_REASONS)
        return RoiSelection(
            detections[sent], reasons[sent], recognizers[sent], crop_xyxy[sent], detections[~sent], reasons[~sent]
        )

    def retain(self, alive_track_ids: set[int]) -> None:
        """Forget the tracks the tracker no longer keeps."""
        for track_id in [t for t in self._sent if t not in alive_track_ids]:
            del self._sent[track_id]
        if self.router is not None:
            self.router.retain(alive_track_ids)

    @property
    def tracks_remembered(self) -> int:
        """Number of tracks with a remembered sent crop."""
        return len(self._sent)

    def _verdict(
        self, detections: Detections, i: int, crop_xyxy: np.ndarray, stream_ts_ms: float, shed_level: int
    ) -> tuple[str, str]:
        """Why row ``i`` is sent or suppressed, and the recognizer of its ROI (:data:`ANY_RECOGNIZER` unless
        routed): the filters, then the routes, then its track (:meth:`_track_reason`)."""
        reason = self._filter(detections, i, crop_xyxy)
        if reason is not None:
            return reason, ANY_RECOGNIZER
        recognizer = (
            ANY_RECOGNIZER if self.router is None
            else self.router.route(int(detections.class_id[i]), int(detections.track_id[i]))
        )
        if recognizer is None:
            return "no_route", ANY_RECOGNIZER
        return self._track_reason(detections, i, stream_ts_ms, shed_level), recognizer

    def _filter(self, detections: Detections, i: int, crop_xyxy: np.ndarray) -> str | None:
        """The filter that rejects row ``i`` (``class``, ``size``, ``score``), or None when it passes; its crop
        rectangle ``crop_xyxy`` (x1, y1, x2, y2) is empty only when the box lies wholly outside the frame."""
        if self._class_ids is not None and int(detections.class_id[i]) not in self._class_ids:
            return "class"
        x1, y1, x2, y2 = (float(v) for v in detections.xyxy[i])
        w, h = x2 - x1, y2 - y1
        if w < self.min_size_px or h < self.min_size_px:
            return "size"
        if self.cfg.max_size_px is not None and (w > self.cfg.max_size_px or h > self.cfg.max_size_px):
            return "size"
        if crop_xyxy[2] <= crop_xyxy[0] or crop_xyxy[3] <= crop_xyxy[1]:
            return "size"
        if float(detections.score[i]) < self.cfg.min_score:
            return "score"
        return None

    def _track_reason(self, detections: Detections, i: int, stream_ts_ms: float, shed_level: int) -> str:
        """Why row ``i`` (which passed the filters) is sent or suppressed; records it when sent (a send shed at
        ``shed_level`` is suppressed as ``backlog`` and not recorded)."""
        if self.cfg.mode == "every_detection":
            return "backlog" if sheds("every_detection", shed_level) else "every_detection"
        track_id = int(detections.track_id[i])
        if track_id < 0:
            return "tentative"
        x1, y1, x2, y2 = (float(v) for v in detections.xyxy[i])
        crop = SentCrop(stream_ts_ms, (x2 - x1) * (y2 - y1), float(detections.score[i]))
        reason = self._resend_reason(self._sent.get(track_id), crop)
        if sheds(reason, shed_level):
            return "backlog"
        if reason in SENT_REASONS:
            self._sent[track_id] = crop
        return reason

    def _resend_reason(self, last: SentCrop | None, crop: SentCrop) -> str:
        """``first``, ``refresh``, ``better`` or ``sent_recently`` for a confirmed track's new crop."""
        if last is None:
            return "first"
        refresh_ms = self.cfg.refresh_s * 1000.0
        if refresh_ms > 0 and crop.stream_ts_ms - last.stream_ts_ms >= refresh_ms:
            return "refresh"
        if is_better(crop, last, self.cfg.better_area_ratio, self.cfg.better_score_margin):
            return "better"
        return "sent_recently"


def is_better(crop: SentCrop, last: SentCrop, area_ratio: float, score_margin: float) -> bool:
    """Whether ``crop`` is clearly better than ``last`` (module docstring: *larger* or *surer*)."""
    larger = crop.area_px2 >= area_ratio * last.area_px2 and crop.score >= last.score - SCORE_EPS
    surer = crop.score >= last.score + score_margin - SCORE_EPS and crop.area_px2 >= last.area_px2
    return larger or surer


ANY_RECOGNIZER = ""
"""The recognizer of ROIs from a camera without routes (no single recognizer known): any worker takes them."""


class ClassRouter:
    """The routes of one camera, with the recognizer each live track was pinned to.

    Not thread-safe: one instance per camera, used from the detector thread. State is bounded by the tracker:
    call :meth:`retain` with the tracker's live ids each frame.

    Args:
        routes: the camera's routes in order (``[]``: every class to :data:`ANY_RECOGNIZER`).
        class_names: the detector's class names, index = ``class_id``.

    Raises:
        ValueError: a route names a class the detector does not have (possible only with a class-names file,
            which config validation cannot read).
    """

    def __init__(self, routes: Sequence[RouteConfig], class_names: Sequence[str]) -> None:
        index = {name: class_id for class_id, name in enumerate(class_names)}
        self._by_class: dict[int, str] = {}
        self._rest: str | None = None if routes else ANY_RECOGNIZER
        for route in routes:
            if route.classes is None:
                self._rest = route.recognizer
                break
            for name in route.classes:
                if name not in index:
                    raise ValueError(f"route to {route.recognizer!r}: class {name!r} is not a detector class name")
                self._by_class.setdefault(index[name], route.recognizer)
        self._pinned: dict[int, str] = {}

    def route(self, class_id: int, track_id: int = -1) -> str | None:
        """The recognizer for a detection, or None when no route takes its class.

        Args:
            class_id: detector class index.
            track_id: its track (-1: none); a track keeps the recognizer of its first routed detection.
        """
        pinned = self._pinned.get(track_id) if track_id >= 0 else None
        if pinned is not None:
            return pinned
        recognizer = self._by_class.get(class_id, self._rest)
        if recognizer is not None and track_id >= 0:
            self._pinned[track_id] = recognizer
        return recognizer

    def retain(self, alive_track_ids: Iterable[int]) -> None:
        """Forget the pins of tracks the tracker no longer keeps."""
        alive = set(alive_track_ids)
        for track_id in [t for t in self._pinned if t not in alive]:
            del self._pinned[track_id]

    @property
    def tracks_pinned(self) -> int:
        """Number of live tracks with a pinned recognizer."""
        return len(self._pinned)


def route_crop_sides(routes: Iterable[RouteConfig], default_px: int) -> dict[str, int]:
    """The longest side of the crops sent to each routed recognizer, px (0: as cut): a route's
    ``crop_max_side_px``, else the edge's ``roi.crop_max_side_px`` (``default_px``). A recognizer that several
    routes name gets the largest of their sizes (0, as cut, is the largest): no route's crops are smaller than
    it asked for."""
    sides: dict[str, int] = {}
    for route in routes:
        side = default_px if route.crop_max_side_px is None else route.crop_max_side_px
        known = sides.get(route.recognizer)
        sides[route.recognizer] = side if known is None else (0 if 0 in (known, side) else max(known, side))
    return sides

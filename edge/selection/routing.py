"""Which recognizer a detection's ROI is for: the routes of one camera, by class, first match wins (pure logic).

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

from vcascade.core.config import RouteConfig

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

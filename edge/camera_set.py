"""The cameras of one edge, including cameras added and removed while it runs (issue 8, ``vcascade camera``).

Follow one removal: :meth:`CameraSet.remove` stops the camera's reader (its own stop event); the reader ends
and closes its frame slot; the detector still takes the frames already queued; once the reader has ended and
its slot is empty, :meth:`CameraSet.settle` forgets the camera's tracker and slot, and its ROIs still in flight
finish at the link as usual (a result, or a drop after ``roi_timeout_s`` and the retries). When its books
balance (``sent = results + drops``) the removal is ``closed``: those numbers are final, stay in the snapshot
(and so in the run summary) and in the Prometheus counters, whose series are never deleted.

Every change runs on the edge's loop thread (:mod:`vcascade.edge.control` queues them there), so the tracker and
ROI policy of a camera are never touched by two threads. :meth:`CameraSet.readers` may be read from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.capture.source import STOP_JOIN_S, CameraReader

log = logging.getLogger(__name__)

MAX_REMOVED_KEPT = 256
"""Removed cameras whose final books are kept in the snapshot, at most (the oldest are forgotten first)."""


class CameraChangeError(ValueError):
    """A camera cannot be added or removed (name in use, unknown camera, ...). The message says why.

    Recovery: none needed; the edge is unchanged and the control client reports the message.
    """


class CameraSet:
    """The camera readers of one edge and their life cycle: ``active`` -> ``removing`` -> ``closed``.

    Args:
        edge: the edge's name.
        slots: the frame slots shared by the readers and the detector.
        node: the edge node (``add_camera``/``remove_camera``: tracking and the link's books; ``refusal``: why a
            camera must not start); any object with those methods and a ``link`` attribute
            (:class:`vcascade.edge.link.broker_link.BrokerLink`).
    """

    def __init__(self, edge: str, slots: FrameSlots, node) -> None:
        self.edge, self.slots, self.node = edge, slots, node
        self._lock = threading.Lock()
        self._active: dict[str, CameraReader] = {}
        self._removing: dict[str, CameraReader] = {}
        self._closed: OrderedDict[str, CameraReader] = OrderedDict()

    @property
    def link(self) -> BrokerLink:
        """The edge's broker link (its books per camera)."""
        return self.node.link

    def start(self, camera: str, cfg: CameraConfig) -> CameraReader:
        """Start reading a camera of the deployment file (its tracking exists already); a camera the node refuses
        (its face model is missing) goes straight to ``failed`` with the reason and reads nothing."""
        reader = CameraReader(self.edge, camera, cfg, self.slots, threading.Event(), self.node.refusal(camera))
        with self._lock:
            self._active[camera] = reader
        reader.start()
        return reader

    def add(self, camera: str, cfg: CameraConfig) -> CameraReader:
        """Add a camera at run time: tracking and books first, then its reader (the edge's loop thread).

        Raises:
            CameraChangeError: the name is in use by a camera that is read, or still being removed.
        """
        with self._lock:
            if camera in self._active or camera in self._removing:
                state = "read by this edge" if camera in self._active else "still being removed"
                raise CameraChangeError(f"camera {camera!r} is {state}")
            self._closed.pop(camera, None)  # added again: its books continue
        self.node.add_camera(camera, cfg)
        log.info("edge %s: camera %s added (%s)", self.edge, camera, redact_url(cfg.url))
        return self.start(camera, cfg)

    def remove(self, camera: str) -> None:
        """Stop reading a camera; :meth:`settle` finishes the removal (the edge's loop thread).

        Raises:
            CameraChangeError: no camera of that name is read by this edge.
        """
        with self._lock:
            reader = self._active.pop(camera, None)
            if reader is None:
                known = "already removed" if camera in self._removing or camera in self._closed else "unknown"
                raise CameraChangeError(f"camera {camera!r} is {known} on edge {self.edge}")
            reader.removal = "removing"
            self._removing[camera] = reader
        reader.stop.set()
        log.info("edge %s: camera %s removing", self.edge, camera)

    def settle(self) -> None:
        """Advance removals (the edge's loop thread, between frames): forget a camera whose reader ended and whose
        frames were all detected; close its books once every ROI it sent has a result or a drop."""
        with self._lock:
            removing = list(self._removing.items())
        tallies = self.link.tally_copy() if removing else {}
        for camera, reader in removing:
            if reader.is_alive() or self.slots.queued(camera):
                continue
            if camera in self.slots.skipped:  # first time here: the camera's last frame has been detected
                self.slots.remove_camera(camera)
                self.node.remove_camera(camera)
            tally = tallies.get(camera)
            if tally is not None and tally.sent != tally.results + sum(tally.drops.values()):
                continue  # ROIs still in flight: they end as results or drops at the link
            self._close(camera, reader)

    def _close(self, camera: str, reader: CameraReader) -> None:
        reader.removal = "closed"
        with self._lock:
            del self._removing[camera]
            self._closed[camera] = reader
            while len(self._closed) > MAX_REMOVED_KEPT:
                self._closed.popitem(last=False)
        log.info("edge %s: camera %s removed, books closed", self.edge, camera)

    def readers(self) -> list[CameraReader]:
        """Every camera reader to report: active, being removed, and removed with closed books (any thread)."""
        with self._lock:
            return [*self._active.values(), *self._removing.values(), *self._closed.values()]

    def open_count(self) -> int:
        """Cameras read now or still being removed."""
        with self._lock:
            return len(self._active) + len(self._removing)

    def stop_all(self) -> None:
        """Stop every reader (shutdown)."""
        for reader in self.readers():
            reader.stop.set()

    def join_all(self) -> None:
        """Wait for the readers to end: a capture thread still inside FFmpeg at interpreter exit aborts it."""
        for reader in self.readers():
            reader.join(timeout=STOP_JOIN_S + 1.0)

"""Per-camera multi-object tracking with ByteTrack (Roboflow's ``trackers`` package).

ByteTrack (Zhang et al., "ByteTrack: Multi-Object Tracking by Associating Every Detection Box", ECCV 2022)
matches sure detections to Kalman-predicted tracks first, then uses the unsure ones only to keep existing
tracks alive. It is class-agnostic: a track keeps its id if the detector's class flickers.

Time: the tracker is fed the frame's stream timestamp (PTS, seconds), so a skipped or dropped frame is a
longer Kalman step, not a missing one, and lost tracks expire after ``lost_track_s`` of *stream* time.
A timestamp that goes backwards (a looping file, a camera that reconnected and restarted its clock) starts
the camera's tracking afresh (ids keep increasing: they are never reused within a process).
"""

from __future__ import annotations

import math

import numpy as np
import supervision as sv
from trackers import ByteTrackTracker

from vcascade.core.config import TrackerConfig
from vcascade.core.detections import Detections

REFERENCE_FPS = 30.0
"""Frame rate the library's Kalman noise and lost-track buffer are tuned for (ByteTrack on MOT17, 30 fps).

With timestamps, one Kalman step is ``elapsed_s * REFERENCE_FPS`` units, i.e. the motion model stays in
physical time whatever the camera's real rate, and ``lost_track_buffer`` (in 30 fps frames) is
``lost_track_s * REFERENCE_FPS``."""


class CameraTracker:
    """ByteTrack state of one camera: detections in, the same detections with their track ids out.

    Not thread-safe: one instance per camera, used from the detector thread.
    """

    def __init__(self, cfg: TrackerConfig) -> None:
        self.cfg = cfg
        self._tracker = self._new_tracker()
        self._last_ts_s: float | None = None
        self._id_offset = 0  # added to library ids so that ids stay unique across resets
        self._next_id = 0  # one more than the highest id returned so far
        self.resets = 0

    def _new_tracker(self) -> ByteTrackTracker:
        cfg = self.cfg
        return ByteTrackTracker(
            lost_track_buffer=max(1, round(cfg.lost_track_s * REFERENCE_FPS)),
            frame_rate=REFERENCE_FPS,
            track_activation_threshold=cfg.new_track_score,
            minimum_consecutive_frames=cfg.min_hits,
            minimum_iou_threshold=cfg.min_iou,
            high_conf_det_threshold=cfg.high_score,
        )

    def update(self, detections: Detections, stream_ts_ms: float) -> Detections:
        """Associate one frame's detections with the camera's tracks.

        Args:
            detections: the frame's detections (any ``track_id`` they carry is ignored).
            stream_ts_ms: the frame's PTS, ms; must increase from frame to frame (a decrease resets tracking;
                a NaN or infinite value leaves the frame untracked).

        Returns:
            The same rows in the same order, with ``track_id`` (int64) set: an id >= 0 for rows matched to
            a confirmed track, ``-1`` for rows that are not (yet) part of one (a new track before ``min_hits``
            matches, or a low-score detection that matched nothing).
        """
        ts_s = stream_ts_ms / 1000.0
        if not math.isfinite(ts_s):  # no usable PTS: leave tracks untouched, nothing is tracked on this frame
            return Detections(detections.xyxy, detections.score, detections.class_id)
        if self._last_ts_s is not None and ts_s < self._last_ts_s:
            self._restart()
        self._last_ts_s = ts_s
        n = len(detections)
        sv_detections = sv.Detections(
            xyxy=detections.xyxy.astype(np.float64).reshape(n, 4),
            confidence=detections.score.astype(np.float64),
            class_id=detections.class_id.astype(int),
            data={"row": np.arange(n)},
        )
        tracked = self._tracker.update(sv_detections, timestamp=ts_s)
        track_id = np.full(n, -1, np.int64)
        if len(tracked):
            ids = np.asarray(tracked.tracker_id, np.int64)
            track_id[np.asarray(tracked.data["row"], int)] = np.where(ids >= 0, ids + self._id_offset, -1)
            self._next_id = max(self._next_id, int(track_id.max()) + 1)
        return Detections(detections.xyxy, detections.score, detections.class_id, track_id)

    def alive_ids(self) -> set[int]:
        """Ids of the confirmed tracks still kept (matched, or lost for less than ``lost_track_s``)."""
        return {t.tracker_id + self._id_offset for t in self._tracker.tracks if t.tracker_id >= 0}

    def _restart(self) -> None:
        """Forget every track after the stream's clock went backwards; later ids never repeat earlier ones."""
        self._id_offset = self._next_id
        self._tracker = self._new_tracker()
        self.resets += 1

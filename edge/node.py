"""The edge's step after detection: tracker -> analytics -> ROI policy -> crops -> broker link.

Follow one ROI: a :class:`~edge.capture.source.CameraReader` decodes a frame into the :class:`~edge.capture.frames.FrameSlots`;
one of the :class:`~edge.detection.pool.DetectorPool`'s threads takes it and runs the detector (as many runs at once
as the edge has cores, :mod:`vcascade.core.runtime.threads`); the edge's loop (:mod:`vcascade.edge.process`) gets the
detections back in take order and :meth:`EdgeNode.handle` tracks them (:mod:`vcascade.edge.selection.tracking`), turns the tracks of a camera with
``analytics`` into line, zone and dwell events (:mod:`vcascade.edge.analytics`), lets the ROI policy select the ones
worth sending (:mod:`vcascade.edge.selection.roi_policy`: one :class:`~vcascade.edge.selection.roi_selection.RoiSelection` per frame;
the others become :class:`~vcascade.edge.way_back.Tracked` with their track's cached identity, :mod:`vcascade.edge.selection.identity_cache`), crops,
JPEG-encodes and heads each selected row (:mod:`vcascade.edge.selection.roi`) and submits it to the
:class:`~edge.link.broker_link.BrokerLink`, which sends it to a broker, receives the result, closes the latency account
(:mod:`vcascade.edge.link.state`) and hands it to the way back (:mod:`vcascade.edge.way_back`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from typing import Any

import numpy as np

from vcascade.core.config import CameraConfig, RoiConfig, RoiPolicyConfig
from vcascade.core.detections import Detections
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.analytics.camera import CameraAnalytics
from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.capture.frames import Frame
from vcascade.edge.detection import Detector
from vcascade.edge.detection.motion import MotionGates
from vcascade.edge.detection.pool import DetectedFrame
from vcascade.edge.history.writer import HistoryWriter
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.metrics import EdgeTelemetry
from vcascade.edge.preview.annotate import camera_geometry
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.privacy.model_file import PrivacyModels
from vcascade.edge.privacy.redaction import CameraRedaction, RedactedFrame
from vcascade.edge.selection.identity_cache import IdentityCache
from vcascade.edge.selection.roi import roi_header
from vcascade.edge.selection.roi_selection import RoiSelection
from vcascade.edge.selection.roi_policy import ClassRouter, RoiPolicy, route_crop_sides
from vcascade.edge.selection.tracking import CameraTracker
from vcascade.edge.way_back import Tracked

log = logging.getLogger(__name__)

FRAME_AGE_WINDOW = 2000
"""Frames per camera over which the snapshot's frame age percentiles are computed."""


class CameraTracking:
    """The tracking state of one camera: its ByteTrack tracker, its ROI policy, its analytics, the lines and zones
    its previews show, the redaction of what leaves."""

    def __init__(
        self, policy_cfg: RoiPolicyConfig, roi_cfg: RoiConfig, router: ClassRouter | None = None,
        analytics: CameraAnalytics | None = None, camera_cfg: CameraConfig | None = None,
        redaction: CameraRedaction | None = None, unredacted: frozenset[str] = frozenset(),
        crop_sides: dict[str, int] | None = None,
    ) -> None:
        """``policy_cfg``: the camera's ROI policy; ``roi_cfg``: its edge's ``roi`` (minimum size, padding);
        ``router``: its routes (None: every ROI for any recognizer); ``analytics``: its lines and zones (None:
        none); ``camera_cfg``: its settings (the lines and zones its previews draw); ``redaction``: what its
        images get before they leave (None: the camera was refused, nothing of it leaves); ``unredacted``: the
        recognizers whose routes ask for faces as they are; ``crop_sides``: the longest side of the crops sent to
        each recognizer, px (0: as cut; a recognizer not in it: ``roi_cfg.crop_max_side_px``)."""
        self.redaction, self.unredacted = redaction, unredacted
        self.crop_sides, self.default_crop_side = crop_sides or {}, roi_cfg.crop_max_side_px
        self.geometry = camera_geometry(camera_cfg)
        self.tracker = CameraTracker(policy_cfg.tracker)
        self.analytics = analytics
        self.policy = RoiPolicy(policy_cfg, roi_cfg.min_size_px, roi_cfg.padding_px, router)
        self.emit_tracked = policy_cfg.emit_tracked
        self.detected = 0
        self.still = 0  # frames the motion gate kept from the detector
        self.carried = Detections.empty()  # the last detected frame's detections, carried over still frames
        self.frame_ages_ms: deque[float] = deque(maxlen=FRAME_AGE_WINDOW)

    def frame_age_stats(self) -> dict[str, Any]:
        """``detected`` (frames detected), ``still`` (frames not detected for lack of motion) and frame age p50/p99
        in ms over the last ``FRAME_AGE_WINDOW`` detected frames.

        Frame age: from the frame's capture (``Frame.capture_s``) to the start of its detection; what a live
        camera's newest-frame slot keeps bounded.
        """
        ages = np.fromiter(self.frame_ages_ms, float)
        return {
            "detected": self.detected,
            "still": self.still,
            "frame_age_p50_ms": float(np.percentile(ages, 50)) if len(ages) else None,
            "frame_age_p99_ms": float(np.percentile(ages, 99)) if len(ages) else None,
        }


class EdgeNode:
    """Tracking and ROI creation for the frames of one edge process, after detection (runs on the edge's loop
    thread, which also applies camera changes, so no camera's state is touched by two threads).

    ``identities`` must be the identity cache of ``link``'s way back, so that answers reach it; so must ``preview``
    (the live view's previews, :mod:`vcascade.edge.preview.hub`; None: no previews), when given, and ``history``
    (:class:`vcascade.edge.history.writer.HistoryWriter`; None: nothing kept): events then carry their pictures.
    ``privacy_models``: the edge's face and text detectors (:class:`~vcascade.edge.privacy.model_file.PrivacyModels`;
    None: searched in the default model folders).
    """

    def __init__(
        self, settings: EdgeSettings, detector: Detector, link: BrokerLink, identities: IdentityCache,
        preview: PreviewHub | None = None, history: HistoryWriter | None = None,
        privacy_models: PrivacyModels | None = None,
    ) -> None:
        self.name, self.cfg, self.detector, self.link = settings.name, settings.edge, detector, link
        self.preview, self.history = preview, history
        self.privacy_models = privacy_models or PrivacyModels(None)
        self._refusals: dict[str, CameraFault] = {}
        self.settings = settings
        self.telemetry = EdgeTelemetry(self.name)
        self.identities = identities
        self.run_id = uuid.uuid4().hex[:8]
        self.motion = MotionGates(self.telemetry.detection_skipped)  # asked by the detector pool's threads
        self._counter = 0
        self._cameras: dict[str, CameraTracking] = {}
        for cam, cam_cfg in settings.cameras.items():
            self.add_camera(cam, cam_cfg, open_books=False)

    def _analytics(self, camera: str, cam_cfg: CameraConfig) -> CameraAnalytics | None:
        """The camera's lines and zones, publishing their events through the link (None: no ``analytics``)."""
        if cam_cfg.analytics is None:
            return None
        history = self.cfg.history
        width = history.frame_width_px if self.history is not None and history.evidence else None
        return CameraAnalytics(
            self.name, camera, cam_cfg.analytics, self.detector.class_names, self.identities, self.link.publish, width,
            history.jpeg_quality,
        )

    def camera_stats(self, camera: str) -> dict[str, Any]:
        """Frames detected and frame age percentiles of one camera (:meth:`CameraTracking.frame_age_stats`);
        empty for a camera this node does not track."""
        cam = self._cameras.get(camera)
        return cam.frame_age_stats() if cam is not None else {}

    def add_camera(self, camera: str, cam_cfg: CameraConfig, open_books: bool = True) -> None:
        """Start tracking a camera (at start, or added at run time on the detector thread before its first frame):
        its own ROI policy or the edge's, and its own routes or the edge's (:meth:`EdgeSettings.routes_for`);
        ``open_books``: open its books in the link (a camera of the file has them from the start)."""
        policy = cam_cfg.roi_policy or self.cfg.roi.policy
        routes = self.settings.routes_for(cam_cfg)
        router = ClassRouter(routes, self.detector.class_names)
        unredacted = frozenset(r.recognizer for r in routes if r.unredacted_faces) - {
            r.recognizer for r in routes if not r.unredacted_faces}  # a recognizer some route redacts stays redacted
        self._cameras[camera] = CameraTracking(
            policy, self.cfg.roi, router, self._analytics(camera, cam_cfg), cam_cfg,
            self._redaction(camera, cam_cfg), unredacted, route_crop_sides(routes, self.cfg.roi.crop_max_side_px),
        )
        self.motion.add(camera, cam_cfg.motion)
        if open_books:
            self.link.add_camera(camera)
            if self.history is not None:
                self.history.set_limits(camera, cam_cfg.history)

    def _redaction(self, camera: str, cam_cfg: CameraConfig) -> CameraRedaction | None:
        """The camera's redaction; None, with a refusal for its reader (:meth:`refusal`), when its face or text
        model cannot be loaded: the camera must not start rather than send faces or text unredacted."""
        self._refusals.pop(camera, None)
        privacy = cam_cfg.privacy
        faces_cfg, text_cfg = (privacy.faces, privacy.text) if privacy is not None else (None, None)
        key = "privacy.faces.model"
        try:
            faces = self.privacy_models.faces(faces_cfg) if faces_cfg is not None else None
            key = "privacy.text.model"
            text = self.privacy_models.text(text_cfg) if text_cfg is not None else None
        except ModelUnavailable as exc:
            self._refusals[camera] = CameraFault("privacy_model_missing", f"{key}: {exc}")
            return None
        return CameraRedaction(privacy, faces, self.detector.class_names, text)

    def refusal(self, camera: str) -> CameraFault | None:
        """Why ``camera`` must not start (its face or text model is missing or unfit), or None."""
        return self._refusals.get(camera)

    def remove_camera(self, camera: str) -> None:
        """Forget a removed camera's tracks and identities (detector thread), after its last frame."""
        cam = self._cameras.pop(camera, None)
        self.motion.remove(camera)
        if cam is not None and cam.analytics is not None:
            cam.analytics.close()
        self.identities.retain(camera, set())
        if self.preview is not None:
            self.preview.forget(camera)

    def handle(self, detected: list[DetectedFrame]) -> int:
        """Track and send ROIs for frames after detection, in order (:meth:`handle_detections`).

        A ``still`` frame (no motion, not detected) is tracked with its camera's last detections carried over
        (:mod:`vcascade.edge.detection.motion`). A frame the detector rejected (unsupported shape or dtype) is counted as corrupt (``bad_image``) and
        skipped. A camera is never forgotten while one of its frames is in detection (frames stay held in the
        slots until released after this call), so every frame's camera is still tracked here.

        Returns:
            The number of ROIs submitted.
        """
        submitted = 0
        for item in detected:
            frame = item.frame
            if item.still:
                submitted += self.handle_detections(frame, None, item.start_s, item.end_s)
                continue
            if item.detections is None:
                log.warning("edge %s: camera %s: frame %d skipped: %s", self.name, frame.camera, frame.seq, item.error)
                self.telemetry.frame_rejected(frame.camera)
                continue
            submitted += self.handle_detections(frame, item.detections, item.start_s, item.end_s)
        return submitted

    def _class_name(self, class_id: int) -> str:
        names = self.detector.class_names
        return names[class_id] if 0 <= class_id < len(names) else str(class_id)

    def handle_detections(
        self, frame: Frame, detections: Detections | None, detect_start_s: float, detect_end_s: float
    ) -> int:
        """Track one frame's detections, submit the ROIs the policy sends, write ``tracked`` lines for the rest.

        Args:
            frame: the frame the detections belong to.
            detections: its detections, boxes in original-frame pixels; None for a still frame, which is tracked
                with the camera's last detections (nothing moved since they were found).
            detect_start_s, detect_end_s: ``perf_counter()`` seconds around its detection (latency account).

        Returns:
            The number of ROIs submitted.
        """
        cam = self._cameras[frame.camera]
        if detections is None:
            cam.still += 1
            detections = cam.carried
        else:
            self.telemetry.frame_detected(frame.camera, len(detections))
            cam.detected += 1
            cam.frame_ages_ms.append((detect_start_s - frame.capture_s) * 1000.0)
            cam.carried = Detections(detections.xyxy, detections.score, detections.class_id)
        tracked = cam.tracker.update(detections, frame.stream_ts_ms)
        alive = cam.tracker.alive_ids()
        # the one way out (edge/privacy/redaction.py): faces are looked for only when an image of it is made
        redacted = None if cam.redaction is None else cam.redaction.redact(frame, tracked)
        if cam.analytics is not None:  # before the identity cache forgets the dropped tracks
            cam.analytics.process(frame, tracked, alive, redacted)
        cam.policy.retain(alive)
        self.identities.retain(frame.camera, alive)
        selection = cam.policy.decide(tracked, frame.stream_ts_ms, frame.image.shape[:2], self.link.shed_level)
        self._suppressed(frame, selection, cam.emit_tracked)
        preview_due = self.preview is not None and self.preview.due(frame.camera, now_s := time.monotonic())
        if redacted is None or not (preview_due or len(selection)):
            return 0  # nothing of this frame leaves (a refused camera's frames never do)
        if preview_due:
            self.preview.offer(redacted, tracked, now_s, cam.geometry)  # only while someone watches this camera
        return self._submit(redacted, selection, cam, detect_start_s, detect_end_s)

    def _suppressed(self, frame: Frame, selection: RoiSelection, emit_tracked: bool) -> None:
        """Count the detections the policy did not send, per reason; publish a :class:`Tracked` for each followed
        one (:meth:`RoiSelection.followed`) with its track's cached identity."""
        for reason, count in selection.suppressed_counts().items():
            self.telemetry.rois_suppressed(frame.camera, reason, count)
        if not emit_tracked:
            return
        followed = selection.followed()
        for row in range(len(followed)):
            track_id = int(followed.track_id[row])
            identity = self.identities.get(frame.camera, track_id) if track_id >= 0 else None
            class_id = int(followed.class_id[row])
            xyxy = followed.xyxy[row]
            self.link.publish(Tracked(
                frame.camera, frame.seq, frame.stream_ts_ms, frame.capture_unix_ms,
                (float(xyxy[0]), float(xyxy[1]), float(xyxy[2]), float(xyxy[3])), class_id,
                self._class_name(class_id), float(followed.score[row]), track_id, identity,
            ))
            self.telemetry.tracked_line(frame.camera)

    def _submit(
        self, redacted: RedactedFrame, selection: RoiSelection, cam: CameraTracking, detect_start_s: float,
        detect_end_s: float,
    ) -> int:
        """Crop, encode (from the redacted frame) and submit the ROI of each sent row of ``selection``; the rows
        routed to a recognizer in ``cam.unredacted`` keep their faces, each crop is shrunk to its recognizer's
        crop side (``cam.crop_sides``). Returns the number submitted."""
        frame = redacted.frame
        for row in range(len(selection)):
            recognizer = str(selection.recognizer[row])
            image = redacted.crop(selection.crop_xyxy[row], self.cfg.roi.jpeg_quality,
                                  unredacted_faces=recognizer in cam.unredacted,
                                  max_side_px=cam.crop_sides.get(recognizer, cam.default_crop_side))  # fmt: skip
            self._counter += 1
            known = self.identities.gallery_identity(frame.camera, int(selection.detections.track_id[row]),
                                                     str(selection.recognizer[row]))
            roi = roi_header(frame, selection, row, f"{self.name}-{self.run_id}-{self._counter}", known)
            pending = PendingRoi(
                roi, frame.capture_s, detect_start_s, detect_end_s, encoded_s=time.perf_counter(),
                send_reason=str(selection.send_reason[row]), class_name=self._class_name(roi.class_id),
                keep_crop=redacted.crop_fits(image, "snapshot"),  # a face left for its route, or any text, stays there
            )
            self.link.submit(pending, image)
        return len(selection)

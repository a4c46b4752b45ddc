"""The redaction step: the one place that turns a frame into images allowed to leave the edge.

Every exit (ROI crops to the brokers, the live view's previews, the history store's evidence snapshots) takes
only a :class:`RedactedImage`, and only this module can make one: its constructor refuses any caller that does
not hold this module's private token, so an image cannot leave unless it came through here. The broker link,
the preview hub and its server check the type of what they are handed (``TypeError`` otherwise).

Follow one frame: the reader already filled the camera's privacy masks (:mod:`vcascade.edge.privacy.masks`);
when something of the frame is about to leave, :meth:`CameraRedaction.redact` wraps it in a :class:`RedactedFrame`.
The first exit that needs faces redacted runs the face detector once for the frame
(:mod:`vcascade.edge.privacy.centerface`), adds the head band of every box of the head rule's classes, and
blurs or pixelates those regions in a copy of the frame; each crop or preview is then cut from that copy and
JPEG-encoded. The first exit that needs text redacted (``privacy.text``: previews and snapshots only) runs the
text detector once for the frame (:mod:`vcascade.edge.privacy.text_detector`) and redacts its regions the same
way, on top of the faces where that exit has both. An exit the camera's ``exits`` leave out, or an ROI of a route
with ``unredacted_faces: true``, is cut from the masked frame instead and labelled ``redacted=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from vcascade.core.config import PrivacyConfig
from vcascade.core.detections import Detections
from vcascade.core.schema.privacy import EXITS
from vcascade.core.text_regions import DbParams
from vcascade.edge.capture.frames import Frame
from vcascade.edge.privacy.centerface import CenterFace
from vcascade.edge.privacy.masks import FrameMasks
from vcascade.edge.privacy.text_detector import TextDetector
from vcascade.edge.selection.roi import shrink_to_side

_MINT = object()
"""The token only this module holds; :class:`RedactedImage` refuses to be built without it."""

BLUR_FRACTION = 0.5
"""Box-blur kernel of a redacted region, as a fraction of its shorter side (odd, at least 3 px): detail smaller
than half a face is gone, so are its features."""
PIXELATE_BLOCKS = 6
"""Blocks across the longer side of a pixelated region (its mean colour per block)."""


@dataclass(frozen=True)
class RedactedImage:
    """A JPEG image that may leave the edge; made only by :class:`RedactedFrame`.

    Attributes:
        jpeg: the JPEG bytes.
        exit: where it leaves: ``roi``, ``preview`` or ``snapshot`` (:data:`vcascade.core.schema.privacy.EXITS`).
        redacted: True when this exit's redaction ran on it: faces (and head bands) and, in previews and
            snapshots, text regions, as the camera asks; False when this exit or route leaves them as they are
            (privacy masks are filled in every frame either way).
        camera: the camera's name.
        frame_seq: the frame's index in its camera.
        stream_ts_ms: the frame's PTS, ms.
        regions: face, head and text regions redacted in the whole frame (0 when ``redacted`` is False).

    Raises:
        TypeError: built anywhere but in this module.
    """

    jpeg: bytes
    exit: str
    redacted: bool
    camera: str
    frame_seq: int
    stream_ts_ms: float
    regions: int
    _mint: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._mint is not _MINT:
            raise TypeError("a RedactedImage is made only by vcascade.edge.privacy.redaction (the redaction step)")
        if self.exit not in EXITS:
            raise ValueError(f"unknown exit {self.exit!r}; expected one of {EXITS}")


def require_redacted(image: object, exit_name: str) -> RedactedImage:
    """``image`` when it is a :class:`RedactedImage` for ``exit_name``; what every exit calls on what it is handed.

    Raises:
        TypeError: anything else (raw bytes, an array, an image made for another exit).
    """
    if not isinstance(image, RedactedImage) or image.exit != exit_name:
        raise TypeError(f"the {exit_name} exit takes only a RedactedImage made for it, got {type(image).__name__}")
    return image


class RedactedFrame:
    """One frame on its way out: crops and previews of it are cut here, from the face-redacted copy for the exits
    that ask for it. Made by :meth:`CameraRedaction.redact`; used on the edge's loop thread.

    Attributes:
        frame: the frame (privacy masks already filled by its reader).
        regions_xyxy: (n, 4) int32 face and head regions redacted, x1, y1, x2, y2 in frame pixels (x2, y2
            exclusive), found on first use; empty for a camera without face redaction.
    """

    def __init__(self, frame: Frame, redaction: CameraRedaction, detections: Detections) -> None:
        self.frame, self._redaction, self._detections = frame, redaction, detections
        self._pixels_by_kind: dict[tuple[bool, bool], np.ndarray] = {(False, False): frame.image}
        self.regions_xyxy = np.zeros((0, 4), np.int32)
        self._text_xyxy: np.ndarray | None = None

    def crop(
        self, crop_xyxy: np.ndarray, quality: int, *, unredacted_faces: bool = False, max_side_px: int = 0
    ) -> RedactedImage:
        """The JPEG of an ROI crop.

        Args:
            crop_xyxy: (4,) int x1, y1, x2, y2 in frame pixels, x2/y2 exclusive (``RoiSelection.crop_xyxy``).
            quality: JPEG quality 1..100.
            unredacted_faces: the ROI's route asks for faces as they are (``unredacted_faces: true``).
            max_side_px: the crop's longer side is shrunk to this first (its route's ``crop_max_side_px``; 0: as
                cut, :func:`vcascade.edge.selection.roi.shrink_to_side`).

        Raises:
            ValueError: OpenCV could not encode the crop.
        """
        x1, y1, x2, y2 = (int(v) for v in crop_xyxy)
        pixels, redacted = self._pixels("roi", unredacted_faces)
        return self._image(shrink_to_side(pixels[y1:y2, x1:x2], max_side_px), quality, "roi", redacted)

    def render(self, exit_name: str, draw: Callable[[np.ndarray], np.ndarray], quality: int) -> RedactedImage:
        """The JPEG of a whole-frame image (a preview, a snapshot): ``draw`` gets the (redacted) (H, W, 3) uint8
        BGR frame, must not modify it, and returns the (h, w, 3) uint8 BGR image to encode (boxes, labels).

        Raises:
            ValueError: an unknown exit, or OpenCV could not encode the image.
        """
        if exit_name not in EXITS:
            raise ValueError(f"unknown exit {exit_name!r}; expected one of {EXITS}")
        pixels, redacted = self._pixels(exit_name, False)
        return self._image(draw(pixels), quality, exit_name, redacted)

    def redacts(self, exit_name: str) -> bool:
        """True when faces or text are redacted in what leaves through ``exit_name`` (the camera's
        ``privacy.faces`` and ``privacy.text``)."""
        return self._redaction.redacts(exit_name)

    def crop_fits(self, crop: RedactedImage, exit_name: str) -> bool:
        """True when ``crop`` (an ROI crop of this frame) is redacted at least as ``exit_name`` asks, so it may be
        kept for that exit too (the history keeps an answered ROI's crop as snapshot evidence): faces redacted in
        it, or not asked for there, and no text redaction asked for there (ROI crops keep their text)."""
        faces, text = self._redaction.kinds(exit_name)
        return not text and (crop.redacted or not faces)

    def _pixels(self, exit_name: str, unredacted_faces: bool) -> tuple[np.ndarray, bool]:
        """The frame's pixels for an exit, and whether any redaction ran on them; each kind of region is found
        once per frame, each combination of kinds redacted once per frame."""
        faces, text = self._redaction.kinds(exit_name)
        faces = faces and not unredacted_faces
        if (faces, text) not in self._pixels_by_kind:
            if (faces, False) not in self._pixels_by_kind:  # faces: found once, redacted in a copy of the frame
                self.regions_xyxy = self._redaction.regions(self.frame.image, self._detections)
                self._pixels_by_kind[(True, False)] = self._redaction.blur(
                    self.frame.image, self.regions_xyxy, self._redaction.method
                )
            if text:  # text regions found on the frame as it was, redacted on top of the faces where both apply
                if self._text_xyxy is None:
                    self._text_xyxy = self._redaction.text_regions(self.frame.image)
                self._pixels_by_kind[(faces, True)] = self._redaction.blur(
                    self._pixels_by_kind[(faces, False)], self._text_xyxy, self._redaction.text_method
                )
        return self._pixels_by_kind[(faces, text)], faces or text

    @property
    def text_xyxy(self) -> np.ndarray:
        """(m, 4) int32 text regions redacted, x1, y1, x2, y2 in frame pixels (x2, y2 exclusive); empty until an
        exit with text redaction was used."""
        return self._text_xyxy if self._text_xyxy is not None else np.zeros((0, 4), np.int32)

    def _image(self, pixels: np.ndarray, quality: int, exit_name: str, redacted: bool) -> RedactedImage:
        ok, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise ValueError(f"JPEG encoding failed for an image of shape {pixels.shape}")
        frame = self.frame
        regions = 0
        if redacted:
            faces, text = self._redaction.kinds(exit_name)
            regions = len(self.regions_xyxy) * faces + len(self.text_xyxy) * text
        return RedactedImage(buf.tobytes(), exit_name, redacted, frame.camera, frame.seq, frame.stream_ts_ms, regions,
                             _mint=_MINT)


class CameraRedaction:
    """The redaction settings of one camera and the face and text detectors it shares with the edge's other cameras.

    Args:
        privacy: the camera's ``privacy`` settings (None: nothing to redact; images still leave only through
            :class:`RedactedFrame`, labelled ``redacted=False``).
        faces: the face detector (required when ``privacy.faces`` is set).
        class_names: the edge detector's class names, by class id (for the head rule).
        text: the text detector (required when ``privacy.text`` is set).

    Raises:
        ValueError: ``privacy.faces`` is set and ``faces`` is None, or ``privacy.text`` and ``text``.
    """

    def __init__(
        self, privacy: PrivacyConfig | None, faces: CenterFace | None, class_names: Sequence[str],
        text: TextDetector | None = None,
    ) -> None:
        self.settings = privacy.faces if privacy is not None else None
        if self.settings is not None and faces is None:
            raise ValueError("face redaction is on but no face detector was given")
        self.text_settings = privacy.text if privacy is not None else None
        if self.text_settings is not None and text is None:
            raise ValueError("text redaction is on but no text detector was given")
        self.faces, self.text = faces, text
        cfg = self.text_settings
        self.text_method = cfg.method if cfg is not None else "blur"
        self.text_exits: Collection[str] = set(cfg.exits) if cfg is not None else set()
        self.text_params = DbParams(cfg.threshold, cfg.min_score, cfg.unclip_ratio, cfg.max_regions) if cfg else None
        self.masks = FrameMasks(privacy) if privacy is not None and privacy.masks else None
        self.method = self.settings.method if self.settings is not None else "blur"
        self.exits: Collection[str] = set(self.settings.exits) if self.settings is not None else set()
        rule = self.settings.head_rule if self.settings is not None else None
        self.head_class_ids = np.array(
            [i for i, name in enumerate(class_names) if rule is not None and name in rule.classes], np.int64
        )

    def redacts(self, exit_name: str) -> bool:
        """Whether faces or text are redacted in this camera's images of ``exit_name``."""
        return any(self.kinds(exit_name))

    def kinds(self, exit_name: str) -> tuple[bool, bool]:
        """Whether faces, and whether text regions, are redacted in this camera's images of ``exit_name``."""
        return exit_name in self.exits, exit_name in self.text_exits

    def redact(self, frame: Frame, detections: Detections) -> RedactedFrame:
        """The frame on its way out, with its tracked ``detections`` (boxes in frame pixels) for the head rule."""
        return RedactedFrame(frame, self, detections)

    def regions(self, image: np.ndarray, detections: Detections) -> np.ndarray:
        """(n, 4) int32 regions to redact in a (H, W, 3) uint8 BGR frame: each face the detector finds, grown by
        ``box_scale`` around its centre, then the top ``top_fraction`` of every box of the head rule's classes;
        clipped to the frame, x2/y2 exclusive."""
        cfg = self.settings
        faces, _ = self.faces.detect(image, cfg.min_score)
        centre, half = (faces[:, :2] + faces[:, 2:]) / 2, (faces[:, 2:] - faces[:, :2]) * cfg.box_scale / 2
        boxes = [np.concatenate([centre - half, centre + half], axis=1)]
        if cfg.head_rule is not None and len(detections):
            heads = detections.xyxy[np.isin(detections.class_id, self.head_class_ids)].astype(np.float32)
            heads[:, 3] = heads[:, 1] + (heads[:, 3] - heads[:, 1]) * cfg.head_rule.top_fraction
            boxes.append(heads)
        return clip_regions(np.concatenate(boxes), image.shape)

    def blur(self, image: np.ndarray, regions_xyxy: np.ndarray, method: str) -> np.ndarray:
        """A copy of the (H, W, 3) uint8 BGR ``image`` with the (n, 4) int32 ``regions_xyxy`` (frame pixels, x2/y2
        exclusive) redacted by ``method`` (:func:`redact_regions`), then the privacy masks filled again: a region
        that overlaps a mask would otherwise blur the pixels around the mask into it, and a masked pixel leaves
        only as the fill colour."""
        out = redact_regions(image, regions_xyxy, method)
        return self.masks.apply(out) if self.masks is not None and len(regions_xyxy) else out

    def text_regions(self, image: np.ndarray) -> np.ndarray:
        """(m, 4) int32 text regions to redact in a (H, W, 3) uint8 BGR frame: the text detector's regions (each
        grown by the DB unclip offset, ``privacy.text.unclip_ratio``), as axis-aligned boxes clipped to the frame,
        x2/y2 exclusive. Nothing is looked for inside the camera's privacy masks (their fill reads as text)."""
        ignore = self.masks.raster(*image.shape[:2]) if self.masks is not None else None
        boxes, _ = self.text.detect(image, self.text_params, ignore)
        return clip_regions(boxes, image.shape)


def clip_regions(boxes: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(n, 4) float boxes x1, y1, x2, y2 as int32 pixel regions: outward-rounded, clipped to an image of ``shape``
    (H, W, ...), empty ones dropped; x2/y2 exclusive."""
    height, width = shape[:2]
    regions = np.asarray(boxes, np.float32).reshape(-1, 4)
    out = np.empty_like(regions, dtype=np.int32)
    out[:, [0, 2]] = np.clip(np.stack([np.floor(regions[:, 0]), np.ceil(regions[:, 2])], 1), 0, width)
    out[:, [1, 3]] = np.clip(np.stack([np.floor(regions[:, 1]), np.ceil(regions[:, 3])], 1), 0, height)
    return out[(out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])]


def redact_regions(image: np.ndarray, regions_xyxy: np.ndarray, method: str) -> np.ndarray:
    """A copy of ``image`` ((H, W, 3) uint8 BGR) with each region blurred or pixelated.

    Args:
        regions_xyxy: (n, 4) int x1, y1, x2, y2 inside the image, x2/y2 exclusive.
        method: ``blur`` (box blur, kernel :data:`BLUR_FRACTION` of the shorter side) or ``pixelate``
            (:data:`PIXELATE_BLOCKS` blocks across the longer side, each its mean colour).

    Returns:
        (H, W, 3) uint8 BGR, a new array (``image`` is not modified).
    """
    out = image.copy()
    for x1, y1, x2, y2 in regions_xyxy.tolist():
        region = out[y1:y2, x1:x2]
        h, w = region.shape[:2]
        if method == "pixelate":
            step = max(h, w) / PIXELATE_BLOCKS
            small = cv2.resize(region, (max(1, round(w / step)), max(1, round(h / step))), interpolation=cv2.INTER_AREA)
            region[:] = cv2.resize(small, (w, h), interpolation=cv2.INTER_NEAREST)
        else:
            k = max(3, int(min(h, w) * BLUR_FRACTION) | 1)
            region[:] = cv2.blur(cv2.blur(np.ascontiguousarray(region), (k, k)), (k, k))  # twice: close to Gaussian
    return out

"""From the ROI policy's selection to ROIs: the ``wire.Roi`` header of each sent detection, and the plain crop and
JPEG helpers.

Takes a :class:`~vcascade.edge.selection.roi_selection.RoiSelection` row as it is: the policy already applied the size
rules and chose the crop rectangle. The edge itself cuts and encodes its crops in the redaction step
(:meth:`vcascade.edge.privacy.redaction.RedactedFrame.crop`, the only way an image leaves);
:func:`crop_pixels` and :func:`encode_jpeg` serve the centralized baseline (tools/bench_baseline.py), which
sends nothing. Crops are views into the frame (no copy) until JPEG encoding, which is the one copy an ROI needs.
"""

from __future__ import annotations

import cv2
import numpy as np

from vcascade.core.protocol import wire
from vcascade.edge.capture.frames import Frame
from vcascade.edge.selection.roi_selection import RoiSelection


def crop_pixels(image: np.ndarray, crop_xyxy: np.ndarray) -> np.ndarray:
    """The (h, w, 3) uint8 BGR view of ``image`` ((H, W, 3) uint8 BGR) inside ``crop_xyxy`` ((4,) int x1, y1,
    x2, y2 in its pixels, x2/y2 exclusive, as :attr:`RoiSelection.crop_xyxy` holds them)."""
    x1, y1, x2, y2 = (int(v) for v in crop_xyxy)
    return image[y1:y2, x1:x2]


def shrink_to_side(pixels: np.ndarray, max_side_px: int) -> np.ndarray:
    """A (h, w, 3) uint8 BGR crop with its longer side shrunk to ``max_side_px``, aspect ratio kept (area
    interpolation, OpenCV ``INTER_AREA``); the crop itself (no copy) when ``max_side_px`` is 0 or the crop is no
    larger (a route's ``crop_max_side_px``: crops are never enlarged)."""
    h, w = pixels.shape[:2]
    side = max(h, w)
    if max_side_px <= 0 or side <= max_side_px:
        return pixels
    scale = max_side_px / side
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(np.ascontiguousarray(pixels), size, interpolation=cv2.INTER_AREA)


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    """JPEG-encode a (h, w, 3) uint8 BGR crop with OpenCV at ``quality`` (1..100).

    Raises:
        ValueError: OpenCV could not encode the crop.
    """
    ok, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"JPEG encoding failed for a crop of shape {pixels.shape}")
    return buf.tobytes()


def roi_header(frame: Frame, selection: RoiSelection, row: int, roi_id: str, track_identity_id: int = -1) -> wire.Roi:
    """The ``wire.Roi`` header of the ROI of ``selection``'s sent row ``row`` (0 <= row < ``len(selection)``),
    cropped from ``frame``, with the policy's send reason; ``roi_id`` is its globally unique id;
    ``track_identity_id`` the identity its recognizer last gave its track (-1: none). ``ttl_ms`` and ``attempt``
    keep their defaults (the link sets the deadline left when it sends, and the attempt when it resends)."""
    detections = selection.detections
    return wire.Roi(
        roi_id=roi_id,
        camera=frame.camera,
        frame_seq=frame.seq,
        stream_ts_ms=frame.stream_ts_ms,
        capture_unix_ms=frame.capture_unix_ms,
        xyxy=tuple(float(v) for v in detections.xyxy[row]),
        crop_xyxy=tuple(int(v) for v in selection.crop_xyxy[row]),
        class_id=int(detections.class_id[row]),
        score=float(detections.score[row]),
        track_id=int(detections.track_id[row]),
        recognizer=str(selection.recognizer[row]),
        send_reason=str(selection.send_reason[row]),
        track_identity_id=int(track_identity_id),
    )

"""YOLOX object detector on ONNX Runtime: letterbox, one session run per frame, grid decoding, class-aware NMS.

Pre- and post-processing follow the YOLOX reference (Megvii-BaseDetection/YOLOX, Apache-2.0):
``yolox/data/data_augment.py`` ``preproc`` (aspect-preserving resize into the top-left corner of a canvas filled
with 114, BGR, 0..255, not normalised) and ``yolox/utils/demo_utils.py`` ``demo_postprocess`` (grid decoding) and
``multiclass_nms_class_agnostic`` (best class per anchor, score = objectness x class score). The model contract
is described in ``shared/models/README.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Sequence

import cv2
import numpy as np
import onnxruntime as ort

from edge.onnx_runtime import make_session
from vcascade.detections import Detections

STRIDES: tuple[int, ...] = (8, 16, 32)
"""YOLOX head strides, px per grid cell, in output order (``demo_postprocess``)."""

PAD_VALUE = 114
"""Canvas fill value of the letterbox (YOLOX ``preproc``: ``np.ones(...) * 114``)."""

NUM_CLASSES = 80
"""COCO classes; the output row per anchor is [cx, cy, log w, log h, objectness, 80 class scores]."""


def letterbox(frame_bgr: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    """Resize a frame, keeping its aspect ratio, into the top-left corner of a ``size`` x ``size`` canvas.

    Args:
        frame_bgr: (H, W, 3) uint8 BGR; (H, W) or (H, W, 1) gray and (H, W, 4) BGRA are converted to BGR first.
        size: canvas side, px.

    Returns:
        (1, 3, size, size) float32 BGR tensor with values 0..255, pixels outside the resized frame = 114
        (:data:`PAD_VALUE`), and r = min(size / H, size / W), the scale from frame px to canvas px.
        Resized width and height are ``int(W * r)``, ``int(H * r)`` as in YOLOX ``preproc`` (cv2.INTER_LINEAR).

    Raises:
        ValueError: not uint8, an unsupported shape, or an empty frame.
    """
    frame = _to_bgr(frame_bgr)
    h, w = frame.shape[:2]
    r = min(size / h, size / w)
    # +1e-6: a long side of exactly `size` must not become size-1 through float round-off in w * (size / w).
    new_w, new_h = (min(size, max(1, int(side * r + 1e-6))) for side in (w, h))
    canvas = np.full((size, size, 3), PAD_VALUE, np.uint8)
    canvas[:new_h, :new_w] = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    tensor = np.ascontiguousarray(canvas.transpose(2, 0, 1)[None], dtype=np.float32)
    return tensor, r


def _to_bgr(frame: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 BGR from gray (H, W) / (H, W, 1), BGR or BGRA; ValueError otherwise."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8:
        raise ValueError(f"frame must be a uint8 numpy array, got {getattr(frame, 'dtype', type(frame).__name__)}")
    if frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 1):
        conversion = cv2.COLOR_GRAY2BGR
    elif frame.ndim == 3 and frame.shape[2] == 4:
        conversion = cv2.COLOR_BGRA2BGR
    elif frame.ndim == 3 and frame.shape[2] == 3:
        conversion = None
    else:
        raise ValueError(f"frame must have shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got {frame.shape}")
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"frame is empty: shape {frame.shape}")
    return frame if conversion is None else cv2.cvtColor(frame, conversion)


def expected_anchors(size: int, strides: Sequence[int] = STRIDES) -> int:
    """Anchor points of a YOLOX head for a ``size`` x ``size`` input: sum over strides of (size // s)^2."""
    return sum((size // s) ** 2 for s in strides)


@functools.lru_cache(maxsize=8)
def _grid(size: int, strides: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets (A, 2) float32 (x, y) and strides (A, 1) float32, row-major per stride, smallest stride first.

    Same layout as ``demo_postprocess``: ``meshgrid(arange(w), arange(h))`` stacked (x, y), reshaped to (-1, 2).
    """
    cells, cell_strides = [], []
    for s in strides:
        n = size // s
        xv, yv = np.meshgrid(np.arange(n), np.arange(n))
        cells.append(np.stack((xv, yv), axis=2).reshape(-1, 2))
        cell_strides.append(np.full((n * n, 1), s))
    grid = np.concatenate(cells).astype(np.float32)
    stride = np.concatenate(cell_strides).astype(np.float32)
    grid.flags.writeable = stride.flags.writeable = False
    return grid, stride


def decode_outputs(
    raw: np.ndarray, size: int, strides: Sequence[int] = STRIDES
) -> tuple[np.ndarray, np.ndarray]:
    """Turn YOLOX head output into boxes and per-class scores (YOLOX ``demo_postprocess``).

    Per anchor at grid cell (gx, gy) of stride s: x = (cx + gx) * s, y = (cy + gy) * s, w = exp(log w) * s,
    h = exp(log h) * s; score[c] = objectness * class_score[c] (the exported model already applied the sigmoids).

    Args:
        raw: (A, 5 + C) float32, one row per anchor: [cx, cy, log w, log h, objectness, C class scores].
        size: square network input side, px.
        strides: head strides in output order.

    Returns:
        xyxy: (A, 4) float32 boxes in canvas px (x1, y1, x2, y2).
        scores: (A, C) float32, objectness x class score.

    Raises:
        ValueError: ``raw`` is not 2-D with more than 5 columns, or A != sum((size // s)^2).
    """
    grid, stride = _grid(size, tuple(strides))
    if raw.ndim != 2 or raw.shape[1] <= 5 or raw.shape[0] != len(grid):
        raise ValueError(f"raw output must have shape ({len(grid)}, 5 + classes) for size {size}, got {raw.shape}")
    raw = raw.astype(np.float32, copy=False)
    center = (raw[:, 0:2] + grid) * stride
    with np.errstate(over="ignore"):  # absurd log-sizes give inf boxes, removed by the caller
        half = np.exp(raw[:, 2:4]) * stride / 2
    xyxy = np.concatenate((center - half, center + half), axis=1)
    scores = raw[:, 4:5] * raw[:, 5:]
    return xyxy, scores


def batched_nms(xyxy: np.ndarray, score: np.ndarray, class_id: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Class-aware non-maximum suppression with OpenCV's ``cv2.dnn.NMSBoxesBatched``.

    A box is removed when a higher-scored box of the same class overlaps it with IoU > ``iou_threshold``;
    boxes of different classes never suppress each other (YOLOX ``multiclass_nms`` / torchvision
    ``batched_nms`` semantics).

    Args:
        xyxy: (n, 4) float32 boxes, px. score: (n,) float32. class_id: (n,) int.
        iou_threshold: 0..1.

    Returns:
        (k,) int64 indices of the kept boxes, highest score first.
    """
    if len(xyxy) == 0:
        return np.zeros(0, np.int64)
    xywh = np.concatenate((xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]), axis=1).astype(np.float32)
    kept = cv2.dnn.NMSBoxesBatched(xywh, score.astype(np.float32), class_id.astype(np.int32), 0.0, iou_threshold)
    kept = np.asarray(kept, np.int64).reshape(-1)
    return kept[np.argsort(-score[kept], kind="stable")]


def check_yolox_signature(session: ort.InferenceSession, input_size: int, strides: Sequence[int] = STRIDES) -> None:
    """Check that a session is a YOLOX detector for ``input_size``: one input (1, 3, S, S) float32 with S ==
    ``input_size`` (or dynamic), one output (1, A, 85) float32 with A == sum((S // s)^2) (or dynamic).

    Raises:
        ValueError: naming what was expected and what the model has.
    """
    inputs, outputs = session.get_inputs(), session.get_outputs()
    anchors = expected_anchors(input_size, strides)
    want_in = (1, 3, input_size, input_size)
    want_out = (1, anchors, 5 + NUM_CLASSES)
    found = f"found inputs {_describe(inputs)}, outputs {_describe(outputs)}"
    if len(inputs) != 1 or len(outputs) != 1:
        raise ValueError(f"not a YOLOX model: expected 1 input and 1 output, {found}")
    for what, arg, want in (("input", inputs[0], want_in), ("output", outputs[0], want_out)):
        if arg.type != "tensor(float)" or not _shape_matches(arg.shape, want):
            raise ValueError(
                f"not a YOLOX model for input_size {input_size}: expected {what} float32 of shape {want}, {found}"
            )


def _describe(args: Sequence[ort.NodeArg]) -> list[tuple[str, list[int | str | None], str]]:
    return [(a.name, a.shape, a.type) for a in args]


def _shape_matches(shape: Sequence[int | str | None], want: Sequence[int]) -> bool:
    """True when ranks agree and each fixed dimension equals the wanted one (dynamic dims are str or None)."""
    return len(shape) == len(want) and all(not isinstance(d, int) or d == w for d, w in zip(shape, want))


class YoloxDetector:
    """A YOLOX ONNX model on one device, fixed batch of 1: ``detector(frame) -> Detections``.

    Args:
        model_path: the ``.onnx`` file (see ``shared/models/README.md`` for the contract).
        input_size: square network input side, px (416 for YOLOX-Nano/Tiny, 640 for S and larger).
        score_threshold: minimum objectness x class score, 0 < t <= 1.
        nms_iou: IoU above which a lower-scored box of the same class is removed, 0..1.
        class_ids: COCO class ids to keep (None: all 80). Applied after taking each anchor's best class.
        intra_op_threads: ONNX Runtime intra-op threads.
        device: ``"cpu"`` or ``"cuda:N"`` (see :func:`edge.onnx_runtime.make_session`).

    Raises:
        FileNotFoundError: no file at ``model_path``.
        ValueError: a bad argument, or the model's signature does not fit (:func:`check_yolox_signature`).
        RuntimeError: CUDA requested but unavailable.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        input_size: int = 416,
        score_threshold: float = 0.3,
        nms_iou: float = 0.45,
        class_ids: Collection[int] | None = None,
        intra_op_threads: int = 1,
        device: str = "cpu",
    ) -> None:
        if not 0 < score_threshold <= 1 or not 0 <= nms_iou <= 1:
            raise ValueError(f"need 0 < score_threshold <= 1 and 0 <= nms_iou <= 1, got {score_threshold}, {nms_iou}")
        if class_ids is not None and not all(0 <= int(c) < NUM_CLASSES for c in class_ids):
            raise ValueError(f"class_ids must lie in 0..{NUM_CLASSES - 1}, got {sorted(class_ids)}")
        if not os.path.isfile(model_path):
            raise FileNotFoundError(f"YOLOX model not found: {model_path}")
        self.input_size = input_size
        self.score_threshold = score_threshold
        self.nms_iou = nms_iou
        self.class_ids = None if class_ids is None else np.array(sorted({int(c) for c in class_ids}), np.int32)
        self._session = make_session(model_path, intra_op_threads=intra_op_threads, device=device)
        check_yolox_signature(self._session, input_size)
        self._input_name = self._session.get_inputs()[0].name

    def __call__(self, frame: np.ndarray) -> Detections:
        """Detect objects in one frame.

        Args:
            frame: (H, W, 3) uint8 BGR (gray (H, W) and BGRA (H, W, 4) accepted).

        Returns:
            Detections with ``xyxy`` in original-frame px clipped to [0, W] x [0, H], sorted by score, highest
            first; ``track_id`` all -1.

        Raises:
            ValueError: unsupported frame (see :func:`letterbox`).
        """
        tensor, r = letterbox(frame, self.input_size)
        raw = self._session.run(None, {self._input_name: tensor})[0]
        xyxy, scores = decode_outputs(raw[0], self.input_size)
        return self._postprocess(xyxy / r, scores, frame.shape[:2])

    def _postprocess(self, xyxy: np.ndarray, scores: np.ndarray, frame_hw: tuple[int, int]) -> Detections:
        """Best class per anchor, score and class filters, class-aware NMS, clip to the frame."""
        class_id = scores.argmax(axis=1)
        score = scores[np.arange(len(scores)), class_id]
        keep = (score >= self.score_threshold) & np.isfinite(xyxy).all(axis=1)
        if self.class_ids is not None:
            keep &= np.isin(class_id, self.class_ids)
        xyxy, score, class_id = xyxy[keep], score[keep], class_id[keep]
        kept = batched_nms(xyxy, score, class_id, self.nms_iou)
        xyxy, score, class_id = xyxy[kept], score[kept], class_id[kept]
        h, w = frame_hw
        xyxy = np.clip(xyxy, 0, np.array([w, h, w, h], np.float32))
        visible = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])  # boxes wholly in the padding vanish
        return Detections(xyxy[visible], score[visible], class_id[visible])

"""What every detector offers (:class:`Detector`) and the ONNX Runtime machinery the YOLO family shares.

:class:`OnnxDetector` owns one session and runs it on one frame (``detector(frame)``) or on the frames of several
cameras at once (``detector.detect_batch(frames)``). Frames of a batch share one session run when the model's
batch dimension is dynamic (up to ``max_batch`` frames a run) or fixed above 1 (a short last batch is filled
with copies of its last frame, whose results are discarded); a model fixed at batch 1 runs frame by frame.
A family subclass supplies three things: its :class:`~edge.detection.contract.OutputLayout`, its reference
preprocessing (:meth:`OnnxDetector.preprocess`) and its output decoding (:meth:`OnnxDetector.decode`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Sequence
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.detections import Detections
from vcascade.core.runtime.onnx_session import make_session
from vcascade.edge.detection.contract import InputSpec, OutputLayout, check_contract, check_output_array
from vcascade.edge.detection.letterbox import Placement
from vcascade.edge.detection.nms import select_detections


@runtime_checkable
class Detector(Protocol):
    """An object detector: frames in, :class:`~vcascade.core.detections.Detections` in frame px out.

    Attributes:
        class_names: name of each class id the detector emits.
    """

    class_names: tuple[str, ...]

    def __call__(self, frame: np.ndarray) -> Detections:
        """Detect in one (H, W, 3) uint8 BGR frame."""

    def detect_batch(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Detect in several frames (any sizes), one result per frame, in order."""


class OnnxDetector:
    """A YOLO-family ONNX model on one device. Subclasses set :attr:`layout` and implement preprocess/decode.

    Args:
        model_path: the ``.onnx`` file.
        input_size: square network input side, px (must equal the model's fixed height and width).
        score_threshold: minimum best-class score, 0 < t <= 1.
        nms_iou: IoU above which a lower-scored box of the same class is removed, 0..1.
        class_ids: class ids to keep (None: all). Applied after taking each candidate's best class.
        class_names: one name per class the model outputs (default: the 80 COCO names); their count is checked
            against the model's output.
        max_batch: frames per session run at most when the batch dimension is dynamic (>= 1).
        intra_op_threads: ONNX Runtime intra-op threads of one run. Runs from several threads at once are
            safe (one session; ONNX Runtime releases the GIL), which is how the edge uses its cores.
        allow_spinning: let idle ONNX Runtime threads busy-wait.
        device: ``"cpu"`` or ``"cuda:N"`` (see :func:`vcascade.core.runtime.onnx_session.make_session`).

    Raises:
        FileNotFoundError: no file at ``model_path``.
        ValueError: a bad argument.
        DetectorContractError: the model does not fit the family, input size or class names.
        RuntimeError: CUDA requested but unavailable.
    """

    layout: OutputLayout  # set by the subclass, on the class or (when it depends on input_size) per instance
    max_detections: ClassVar[int | None] = None

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        input_size: int = 640,
        score_threshold: float = 0.3,
        nms_iou: float = 0.45,
        class_ids: Collection[int] | None = None,
        class_names: Sequence[str] = COCO_CLASSES,
        max_batch: int = 8,
        intra_op_threads: int = 1,
        allow_spinning: bool = False,
        device: str = "cpu",
    ) -> None:
        _check_arguments(score_threshold, nms_iou, class_ids, class_names, max_batch)
        if not os.path.isfile(model_path):
            raise FileNotFoundError(f"{self.layout.family} detector model not found: {model_path}")
        self.model_path = os.fspath(model_path)
        self.input_size, self.score_threshold, self.nms_iou = input_size, score_threshold, nms_iou
        self.class_names = tuple(class_names)
        self.class_ids = None if class_ids is None else np.array(sorted({int(c) for c in class_ids}), np.int32)
        self._session = make_session(
            model_path, intra_op_threads=intra_op_threads, allow_spinning=allow_spinning, device=device
        )
        self.input: InputSpec = check_contract(
            self._session, model_path, self.layout, input_size, len(self.class_names)
        )
        self.frames_per_run = self.input.batch if self.input.batch is not None else max_batch
        """Frames given to one session run: the model's fixed batch, or ``max_batch`` when it is dynamic."""
        self.session_runs = 0
        """Session runs so far (one per frame for a batch-1 model, one per ``frames_per_run`` frames otherwise)."""
        self._runs_lock = threading.Lock()  # the edge's concurrent detector runs share this detector

    def __call__(self, frame: np.ndarray) -> Detections:
        """Detect objects in one frame.

        Args:
            frame: (H, W, 3) uint8 BGR (gray (H, W) and BGRA (H, W, 4) accepted).

        Returns:
            Detections with ``xyxy`` in frame px clipped to [0, W] x [0, H], highest score first, track ids -1.

        Raises:
            ValueError: unsupported frame (see :func:`vcascade.edge.detection.letterbox.to_bgr`).
        """
        return self.detect_batch([frame])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Detect objects in several frames of any sizes (e.g. one per camera) with as few session runs as the
        model allows (see the module docstring).

        Args:
            images: frames as in :meth:`__call__`.

        Returns:
            One Detections per frame, in order (an empty list for no frames).

        Raises:
            ValueError: an unsupported frame; the message names its index. No frame is detected then.
            DetectorContractError: a dynamic output dimension turned out not to fit at run time.
        """
        prepared = [self._prepare(i, image) for i, image in enumerate(images)]
        results: list[Detections] = []
        for start in range(0, len(prepared), self.frames_per_run):
            chunk = prepared[start : start + self.frames_per_run]
            raw = self._run(np.stack([tensor for tensor, _ in chunk]))
            for one, (_, placement), image in zip(raw, chunk, images[start:]):
                xyxy, scores = self.decode(one)
                results.append(self._select(xyxy, scores, placement, image.shape[:2]))
        return results

    def preprocess(self, frame: np.ndarray) -> tuple[np.ndarray, Placement]:
        """The family's reference preprocessing: frame -> (3, S, S) float32 tensor and its :class:`Placement`."""
        raise NotImplementedError

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The family's decoding of one image's raw output -> (n, 4) float32 canvas-px xyxy, (n, C) scores."""
        raise NotImplementedError

    def _prepare(self, index: int, image: np.ndarray) -> tuple[np.ndarray, Placement]:
        try:
            return self.preprocess(image)
        except ValueError as exc:
            raise ValueError(f"image {index}: {exc}") from None

    def _run(self, batch: np.ndarray) -> np.ndarray:
        """One session run on (n, 3, S, S) float32, cast to the model's dtype -> (n, ...) float32 raw output."""
        n = len(batch)
        if self.input.batch is not None and n < self.input.batch:
            batch = np.concatenate([batch, np.repeat(batch[-1:], self.input.batch - n, axis=0)])
        feed = {self.input.name: batch.astype(self.input.dtype, copy=False)}
        raw = self._session.run([self.input.output_name], feed)[0]
        with self._runs_lock:
            self.session_runs += 1
        check_output_array(raw, self.layout, len(self.class_names), len(batch), self.model_path)
        return raw[:n].astype(np.float32, copy=False)

    def _select(
        self, xyxy: np.ndarray, scores: np.ndarray, placement: Placement, frame_hw: tuple[int, int]
    ) -> Detections:
        return select_detections(
            xyxy, scores, placement, frame_hw, score_threshold=self.score_threshold, nms_iou=self.nms_iou,
            class_ids=self.class_ids, max_detections=self.max_detections,
        )


def _check_arguments(
    score_threshold: float, nms_iou: float, class_ids: Collection[int] | None, class_names: Sequence[str],
    max_batch: int,
) -> None:
    """ValueError naming the first bad constructor argument."""
    if not 0 < score_threshold <= 1 or not 0 <= nms_iou <= 1:
        raise ValueError(f"need 0 < score_threshold <= 1 and 0 <= nms_iou <= 1, got {score_threshold}, {nms_iou}")
    if not class_names:
        raise ValueError("class_names must name at least one class")
    if class_ids is not None and not all(0 <= int(c) < len(class_names) for c in class_ids):
        raise ValueError(f"class_ids must lie in 0..{len(class_names) - 1}, got {sorted(class_ids)}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")

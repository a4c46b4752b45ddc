"""The one detection type passed between edge steps: struct-of-arrays, shape-checked on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Detections:
    """Detections of one frame.

    Attributes:
        xyxy: (n, 4) float32, boxes as x1, y1, x2, y2 in original-frame pixels.
        score: (n,) float32, confidence 0..1 (YOLOX: objectness x class score).
        class_id: (n,) int32, detector class index (COCO order, see :data:`vcascade.core.coco.COCO_CLASSES`).
        track_id: (n,) int64, tracker id, -1 when untracked.

    Raises:
        ValueError: on construction, when shapes or lengths disagree.
    """

    xyxy: np.ndarray
    score: np.ndarray
    class_id: np.ndarray
    track_id: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        xyxy = np.asarray(self.xyxy, dtype=np.float32).reshape(-1, 4) if np.size(self.xyxy) else np.zeros((0, 4), np.float32)
        n = len(xyxy)
        score = np.asarray(self.score, dtype=np.float32).reshape(-1)
        class_id = np.asarray(self.class_id, dtype=np.int32).reshape(-1)
        track_id = np.full(n, -1, np.int64) if self.track_id is None else np.asarray(self.track_id, np.int64).reshape(-1)
        if np.ndim(self.xyxy) not in (1, 2) or (np.size(self.xyxy) and np.shape(self.xyxy)[-1] != 4):
            raise ValueError(f"xyxy must have shape (n, 4), got {np.shape(self.xyxy)}")
        for name, arr in (("score", score), ("class_id", class_id), ("track_id", track_id)):
            if len(arr) != n:
                raise ValueError(f"{name} has {len(arr)} entries, xyxy has {n}")
        object.__setattr__(self, "xyxy", xyxy)
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "class_id", class_id)
        object.__setattr__(self, "track_id", track_id)

    @classmethod
    def empty(cls) -> "Detections":
        """No detections."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.xyxy)

    def __getitem__(self, index: np.ndarray | slice) -> "Detections":
        """Select by boolean mask, index array or slice; always returns Detections."""
        return Detections(self.xyxy[index], self.score[index], self.class_id[index], self.track_id[index])

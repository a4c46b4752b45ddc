"""A torch recognizer exported to ONNX at start-up, to run with ONNX Runtime (``engine: onnxruntime``).

Why: on CPU, ONNX Runtime runs small convolutional recognizers much faster than eager torch (MobileNetV2, the
demo's embedder, micro-batch 8, one thread: about 2x; docs/BENCHMARKS.md), and a latency budget on a CPU
center is mostly recognition time. The export uses ``torch.onnx.export`` with the TorchScript-based exporter
(``dynamo=False``: the dynamo exporter needs the ``onnxscript`` package), ONNX opset :data:`OPSET`, the
batch dimension of every input and output symbolic. The exported graph then goes through the ONNX stage
runtime (:mod:`vcascade.center.stages.onnx_stages`): cut points, ``split_points: auto`` balancing, one session per stage.
Outputs equal torch's within float32 rounding (tests/center/stages/test_torch_onnx.py).
"""

from __future__ import annotations

import io
import warnings

import onnx
import torch
from torch import nn

OPSET = 17
"""ONNX opset of the export (ONNX Runtime >= 1.14 runs it fully)."""


class ExportError(RuntimeError):
    """The torch model could not be exported to ONNX (an operator without an ONNX form, data-dependent
    control flow, ...). Recovery: use ``engine: torch`` for this recognizer."""


def torch_to_onnx(model: nn.Module, input_hw: tuple[int, int]) -> onnx.ModelProto:
    """Export ``model`` (eval mode, on the CPU) to an in-memory ONNX model.

    Args:
        model: takes one (N, 3, H, W) float32 tensor; returns a tensor or a tuple of tensors, batch first.
        input_hw: (H, W) of the input, px.

    Returns:
        The ONNX model: input ``input`` (batch, 3, H, W), outputs ``output0``, ``output1``, ... (batch, ...).

    Raises:
        ExportError: the export failed (the cause is chained).
    """
    sample = torch.zeros(2, 3, *input_hw)
    with torch.inference_mode():
        out = model(sample)
    n_outputs = 1 if isinstance(out, torch.Tensor) else len(out)
    outputs = [f"output{i}" for i in range(n_outputs)]
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(legacy TorchScript-based ONNX export|will be removed)")
            torch.onnx.export(
                model, (sample,), buffer, input_names=["input"], output_names=outputs,
                dynamic_axes={name: {0: "batch"} for name in ["input", *outputs]}, opset_version=OPSET,
                dynamo=False,
            )
    except Exception as exc:  # noqa: BLE001 - the exporter raises many types; the cause is chained
        raise ExportError(f"could not export the torch model to ONNX (use engine: torch): {exc}") from exc
    return onnx.load_model_from_string(buffer.getvalue())

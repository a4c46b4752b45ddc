"""Cut an ONNX model into pipeline stages where exactly one tensor crosses, one ONNX Runtime session per stage.

Cut points: ONNX graphs list their nodes in topological order (ONNX IR spec, "Graphs"). Between node ``i-1``
and node ``i`` the *live* tensors are those produced before (or graph inputs) and consumed at or after ``i``
(or graph outputs); tensors computed from initializers and constants alone are not live (the extractor copies
their producers into whichever stage needs them). Where exactly one tensor is live, the graph can be cut
there: that tensor is the only output of the stage before and the only input of the stage after. The stages
are extracted with ``onnx.utils.Extractor`` (inputs -> outputs reachability). PP-OCRv6_rec_small has 111 such
cut points, YOLOX-nano 18; chained stage outputs equal the whole model's (tests/center/stages/test_onnx_stages.py).

Devices: ``cpu`` (CPUExecutionProvider) or ``cuda:N`` (CUDAExecutionProvider, device_id N, then CPU for the
operators CUDA lacks); a CUDA session that does not really get the CUDA provider is an error, never a silent
CPU fallback. Activations cross stages as numpy arrays on the host.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

from vcascade.core.runtime.onnx_session import open_session, session_options

log = logging.getLogger(__name__)


NumpyActivations = tuple[np.ndarray, ...]
"""What an :class:`OnnxStage` returns: its outputs, in the order of its sub-model's outputs."""


@dataclass(frozen=True)
class CutPoint:
    """A tensor where the graph may be cut.

    Attributes:
        tensor: the tensor's name (the value of a ``split_points`` entry).
        node_index: index in ``graph.node`` of the first node of the stage that begins there.
    """

    tensor: str
    node_index: int


def cut_points(model: onnx.ModelProto) -> list[CutPoint]:
    """Every valid cut point of ``model``'s main graph, in topological order (see the module docstring).

    Graph inputs are not cut points (cutting there leaves an empty first stage); each tensor is listed once.
    """
    graph = model.graph
    constant = _constant_tensors(graph)
    last_use = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name not in constant:
                last_use[name] = index
    for output in graph.output:
        last_use[output.name] = len(graph.node)
    inputs = {i.name for i in graph.input}
    live = {name for name in inputs if name not in constant}
    cuts: list[CutPoint] = []
    seen: set[str] = set()
    for index, node in enumerate(graph.node):
        live = {name for name in live if last_use.get(name, -1) >= index}
        if index > 0 and len(live) == 1:
            (tensor,) = live
            if tensor not in inputs and tensor not in seen:
                cuts.append(CutPoint(tensor, index))
                seen.add(tensor)
        live.update(name for name in node.output if name and name not in constant)
    return cuts


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Initializers, and outputs of nodes whose inputs are all constant (``Constant`` nodes included)."""
    constant = {init.name for init in graph.initializer} | {""}  # "" = an omitted optional input
    for node in graph.node:
        if all(name in constant for name in node.input):
            constant.update(node.output)
    return constant


def check_split_points(model: onnx.ModelProto, split_points: Sequence[str]) -> list[CutPoint]:
    """The :class:`CutPoint` of each name, in order.

    Raises:
        ValueError: a name that is not a valid cut point (the message names it and lists close or first valid
            ones), or names out of topological order.
    """
    valid = cut_points(model)
    by_name = {cut.tensor: cut for cut in valid}
    chosen = []
    for name in split_points:
        if name not in by_name:
            names = [cut.tensor for cut in valid]
            near = difflib.get_close_matches(name, names, n=5) or names[:5]
            raise ValueError(
                f"split point {name!r} is not a tensor where this ONNX graph can be cut (exactly one tensor live); "
                f"{len(names)} valid cut points, e.g. {', '.join(near)} (`vcascade plan` lists the auto choice)"
            )
        chosen.append(by_name[name])
    order = [cut.node_index for cut in chosen]
    if order != sorted(order):
        raise ValueError(f"split points {list(split_points)} are not in the graph's topological order")
    return chosen


def split_onnx(model: onnx.ModelProto, split_points: Sequence[str]) -> list[onnx.ModelProto]:
    """Extract ``len(split_points) + 1`` stage models; stage ``k`` begins at ``split_points[k-1]``.

    Returns:
        The stage models (``[model]`` itself when there are no split points).

    Raises:
        ValueError: see :func:`check_split_points`.
    """
    check_split_points(model, split_points)
    if not split_points:
        return [model]
    names = {v.name for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    if any(name not in names for name in split_points):  # the extractor needs each boundary's type and shape
        model = onnx.shape_inference.infer_shapes(model)
    extractor = onnx.utils.Extractor(model)
    initializers = {init.name for init in model.graph.initializer}
    first_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    boundaries = [first_inputs, *([name] for name in split_points), [o.name for o in model.graph.output]]
    return [extractor.extract_model(ins, outs) for ins, outs in zip(boundaries, boundaries[1:])]


def make_session(model: onnx.ModelProto | bytes, device: str, options: ort.SessionOptions) -> ort.InferenceSession:
    """A session for ``model`` on ``device`` (``cpu``, ``cuda`` or ``cuda:N``): :func:`vcascade.core.runtime.onnx_session.open_session`
    (a CUDA device is really used or the call fails, never a silent CPU fallback).

    Raises:
        ValueError: an unknown device string.
        RuntimeError: CUDA asked for but this onnxruntime build or host cannot provide it; the message names the device.
    """
    return open_session(model if isinstance(model, bytes) else model.SerializeToString(), options, device)


def to_numpy(x: Any) -> np.ndarray:
    """A numpy view or copy of ``x``: numpy as is, a torch tensor detached and copied to the host."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # a torch tensor (torch is not imported here)
        return x.detach().cpu().numpy()
    return np.asarray(x)


class OnnxStage:
    """One pipeline stage: an ONNX Runtime session on its device, same call contract as ``TorchStage``.

    Args:
        model: the stage's model (from :func:`split_onnx`).
        device: ``cpu`` or ``cuda:N``.
        intra_op_threads: ONNX Runtime intra-op threads (>= 1).
        allow_spinning: let idle ONNX Runtime threads busy-wait.

    Raises:
        ValueError / RuntimeError: see :func:`make_session`.
    """

    def __init__(
        self, model: onnx.ModelProto, device: str = "cpu", intra_op_threads: int = 1, allow_spinning: bool = False
    ) -> None:
        self.device = device
        options = session_options(intra_op_threads, allow_spinning, varying_batch=True)  # micro-batches vary
        self.session = make_session(model, device, options)
        inputs = self.session.get_inputs()
        self.input_names = [i.name for i in inputs]
        first_dim = inputs[0].shape[0] if inputs[0].shape else None
        self.fixed_batch: int | None = first_dim if isinstance(first_dim, int) else None
        """The batch size the model's first input fixes, or None when it is dynamic."""
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, inputs: Sequence[Any]) -> NumpyActivations:
        """Run the stage on the previous stage's activations (numpy arrays or torch tensors, in input order).

        Returns:
            The outputs as numpy arrays on the host, in the sub-model's output order.

        Raises:
            ValueError: the number of inputs differs from the sub-model's; ONNX Runtime errors on bad shapes/dtypes.
        """
        if len(inputs) != len(self.input_names):
            raise ValueError(f"stage takes {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        feeds = {name: np.ascontiguousarray(to_numpy(x)) for name, x in zip(self.input_names, inputs)}
        return tuple(self.session.run(self.output_names, feeds))


def fit_batch(model: onnx.ModelProto, sample: np.ndarray) -> np.ndarray:
    """``sample`` (N, ...) cut or repeated to the model's fixed batch size, when its first input fixes one
    (e.g. YOLOX-nano's 1); unchanged when the batch dimension is symbolic."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    fixed = dims[0].dim_value if dims and dims[0].HasField("dim_value") else 0
    if fixed <= 0 or fixed == sample.shape[0]:
        return sample
    return np.resize(sample, (fixed, *sample.shape[1:])).astype(sample.dtype, copy=False)


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Read an ONNX model file (external data is loaded from beside it).

    Raises:
        FileNotFoundError: no such file; onnx's DecodeError: not an ONNX protobuf.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ONNX model {path} does not exist")
    return onnx.load(str(path))


def build_onnx_stages(
    model: onnx.ModelProto,
    split_points: Sequence[str],
    devices: Sequence[str],
    intra_op_threads: int = 1,
    allow_spinning: bool = False,
) -> list[OnnxStage]:
    """Split ``model`` at ``split_points`` and place stage ``k`` on ``devices[k]``.

    Raises:
        ValueError: ``len(devices) != len(split_points) + 1``, or a bad split point (see :func:`check_split_points`);
        RuntimeError: an unavailable CUDA device (see :func:`make_session`).
    """
    if len(devices) != len(split_points) + 1:
        raise ValueError(f"{len(devices)} devices for {len(split_points) + 1} stages")
    parts = split_onnx(model, split_points)
    log.info("ONNX model split into %d stages at %s", len(parts), list(split_points))
    return [OnnxStage(part, device, intra_op_threads, allow_spinning) for part, device in zip(parts, devices)]

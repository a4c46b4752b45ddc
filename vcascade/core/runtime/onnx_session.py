"""ONNX Runtime session creation with explicit threads and an explicit device (the edge's detector, the center's
ONNX stages).

Processes of one host share its cores, so every session is told exactly how many threads it may use and
not to spin idle threads (ONNX Runtime's default busy-waits, which starves the other processes). A CUDA
device is either really used or the call fails: ONNX Runtime silently falls back to the CPU when the CUDA
provider cannot be created, and a detector that quietly runs 20x slower is worse than one that does not start.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import TypeVar

import onnx
import onnxruntime as ort

log = logging.getLogger(__name__)

Checked = TypeVar("Checked")

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_CUDA_DEVICE = re.compile(r"cuda(?::(\d+))?")


def make_session(
    path: str | os.PathLike[str], *, intra_op_threads: int, allow_spinning: bool = False, device: str = "cpu"
) -> ort.InferenceSession:
    """Open an ONNX model as an inference session.

    Args:
        path: the ``.onnx`` file.
        intra_op_threads: threads one operator may use (>= 1). Inter-op threads are 1. Graph optimisation
            level: ALL.
        allow_spinning: let idle intra-op threads busy-wait (``session.intra_op.allow_spinning``; default off).
        device: ``"cpu"``, ``"cuda"`` (= ``"cuda:0"``) or ``"cuda:N"``. For CUDA the session's providers are
            CUDA first, CPU second (the CPU provider runs the few operators CUDA lacks).

    Raises:
        ValueError: ``intra_op_threads < 1`` or an unknown device string.
        RuntimeError: CUDA was asked for but this ONNX Runtime build or host cannot provide it.
        onnxruntime exceptions (``InvalidProtobuf``, ``NoSuchFile``, ``Fail``, ...): the file is missing or not
            a loadable ONNX model.
    """
    return open_session(os.fspath(path), session_options(intra_op_threads, allow_spinning), device)


def session_options(
    intra_op_threads: int = 1, allow_spinning: bool = False, varying_batch: bool = False
) -> ort.SessionOptions:
    """Session options: ``intra_op_threads`` per operator (>= 1), one inter-op thread, idle threads spinning only
    when ``allow_spinning`` (``session.intra_op.allow_spinning``), graph optimisation level ALL.

    ``varying_batch`` (the recognizer's micro-batches, 1 to ``max_batch`` ROIs) turns ONNX Runtime's memory
    patterns off (``enable_mem_pattern``): a pattern is planned and kept per input shape, so every new batch
    size would add memory for the life of the process; measured on the MobileNetV2 embedder, RSS kept rising
    by about 25 MB over mixed batch sizes with patterns on and stayed flat without, at the same speed.

    Raises:
        ValueError: ``intra_op_threads < 1``.
    """
    if intra_op_threads < 1:
        raise ValueError(f"intra_op_threads must be >= 1, got {intra_op_threads}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = not varying_batch
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def checked_cpu_session(
    path: str | os.PathLike[str], check: Callable[[onnx.ModelProto], Checked], error: type[Exception], what: str,
    intra_op_threads: int = 1,
) -> tuple[ort.InferenceSession, Checked]:
    """Load the ONNX file ``path``, let ``check`` look at the model (and edit it in place), then open a CPU session
    on what it left; for models whose inputs and outputs the caller relies on (the edge's redaction detectors).

    Returns:
        The session, and what ``check`` returned (an input's name, say).

    Raises:
        error: ``check`` raised it, or onnx or ONNX Runtime could not load the file
            (``"<path> is not a loadable <what>: <their message>"``).
    """
    try:
        model = onnx.load(os.fspath(path))
        checked = check(model)
        return open_session(model.SerializeToString(), session_options(intra_op_threads), "cpu"), checked
    except error:
        raise
    except Exception as exc:  # noqa: BLE001 - onnx and ORT raise their own types for unreadable models
        raise error(f"{path} is not a loadable {what}: {exc}") from exc


def open_session(model: str | bytes, options: ort.SessionOptions, device: str) -> ort.InferenceSession:
    """A session for ``model`` (a file path, or the serialised model) on ``device`` (``cpu``, ``cuda``, ``cuda:N``).

    Raises:
        ValueError: an unknown device string.
        RuntimeError: CUDA was asked for but this ONNX Runtime build or host cannot provide it.
    """
    if device == "cpu":
        return ort.InferenceSession(model, options, providers=[CPU])
    match = _CUDA_DEVICE.fullmatch(device)
    if match is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return _cuda_session(model, options, device_id=int(match.group(1) or 0))


def _cuda_session(path: str | bytes, options: ort.SessionOptions, *, device_id: int) -> ort.InferenceSession:
    """A session on ``cuda:device_id``, or RuntimeError; never a silent CPU fallback.

    onnxruntime-gpu lists the CUDA provider as available even on hosts without a GPU or CUDA libraries, so
    availability is decided by creating the session and reading back the providers it really got.
    """
    device = f"cuda:{device_id}"
    if CUDA not in ort.get_available_providers():
        raise RuntimeError(
            f"device {device!r} requested but this onnxruntime build has no {CUDA} "
            f"(install onnxruntime-gpu, or use device 'cpu')"
        )
    if hasattr(ort, "preload_dlls"):  # onnxruntime >= 1.21: load CUDA/cuDNN from the nvidia-* wheels torch installs
        ort.preload_dlls()
    try:
        session = ort.InferenceSession(path, options, providers=[(CUDA, {"device_id": device_id}), CPU])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types; the cause is kept
        raise RuntimeError(f"device {device!r}: could not create an ONNX Runtime CUDA session: {exc}") from exc
    if CUDA not in session.get_providers():
        raise RuntimeError(
            f"device {device!r} requested but ONNX Runtime could not start {CUDA} (no GPU {device_id}, or CUDA / "
            f"cuDNN libraries missing; ONNX Runtime's log above says which); use device 'cpu' or fix the CUDA install"
        )
    log.info("ONNX Runtime session on %s for %s", device, path if isinstance(path, str) else "an in-memory model")
    return session

"""What every recognition head shares: the :class:`Head` protocol, its build context, list files.

A head turns the last pipeline stage's output for a micro-batch of ``n`` ROIs into ``n`` typed outputs (one of
:data:`vcascade.core.protocol.wire.HEAD_OUTPUTS`, tagged by the head's kind), which the worker puts in each ROI's
:class:`vcascade.core.protocol.wire.Result` as they are, so it needs no per-head code. Heads are called from one thread
(the worker's head thread) and need not be thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from vcascade.core.runtime.models import find_model
from vcascade.core.runtime.resources import resolve
from vcascade.core.protocol.wire import HeadOutput, Roi


class Head(Protocol):
    """A recognition head.

    Attributes:
        input_ndim: rank the head expects: 2 = (n, D) features (higher-rank outputs are flattened per row by
            :func:`head_input`), 3 = (n, T, C) sequences.
    """

    input_ndim: int

    def __call__(self, outputs: np.ndarray, rois: Sequence[Roi] | None = None) -> list[HeadOutput]:
        """One output per row of ``outputs`` (float array of rank ``input_ndim``), in row order, all of the
        head's own :data:`vcascade.core.protocol.wire.HeadOutput` type. ``rois``: the micro-batch's ROIs in row order
        (camera, time), or None when unknown."""
        ...

    def close(self) -> None:
        """Release what the head holds (the embedding head: push to its identity store, stop its sync)."""
        ...


@dataclass(frozen=True)
class HeadContext:
    """What a head may need from its recognizer when it is built.

    Attributes:
        model_path: local path of the recognizer's ONNX model (``charset: model`` reads its metadata), or None
            when the recognizer has no ONNX file (torch recognizers).
        recognizer: the recognizer's name (the embedding head's identity space).
        worker: the worker's name (metrics label).
        text_regions: for a two-model text recognizer (``type: ocr``): its detector's ``(input_hw, resize)``
            (the text head then answers every region, boxes in crop pixels); None otherwise.
    """

    model_path: str | None = None
    recognizer: str = "recognizer"
    worker: str = "worker"
    text_regions: tuple[tuple[int, int], str] | None = None


def head_context(recognizer_cfg: Any, model_dir: str | Path | None = None) -> HeadContext:
    """The :class:`HeadContext` of a recognizer config: its ONNX ``model`` when it has one (read with ``getattr``,
    so recognizer types without a ``model`` field work too). A ``package://`` URI is resolved; a path that is not
    a file is looked up as a file name in the model folders (:func:`vcascade.core.runtime.models.find_model`: ``model_dir``,
    ``$VCASCADE_MODEL_DIR`` and the user cache, where ``python -m tools.fetch_models --text`` puts it).

    Raises:
        vcascade.core.runtime.resources.ResourceNotFound: a ``package://`` model URI that does not resolve.
    """

    model = getattr(recognizer_cfg, "model", None)
    if not model:
        return HeadContext()
    path = resolve(str(model))
    found = None if Path(path).is_file() else find_model(path, model_dir)
    regions = None
    if getattr(recognizer_cfg, "type", "") == "ocr":
        regions = (tuple(recognizer_cfg.input_hw), recognizer_cfg.resize)
    return HeadContext(model_path=str(found or path), text_regions=regions)


def head_input(outputs: Any, n_rows: int, input_ndim: int) -> np.ndarray:
    """The last stage's output as the numpy array a head takes.

    Args:
        outputs: torch tensor (any device) or numpy array whose first dimension is ``n_rows``.
        n_rows: ROIs in the micro-batch.
        input_ndim: the head's :attr:`Head.input_ndim`; 2 flattens each row to (n, D), 3 keeps (n, T, C).

    Returns:
        float32 array, (n, D) or (n, T, C).

    Raises:
        ValueError: the first dimension is not ``n_rows``, or a rank-3 head gets another rank.
    """
    if hasattr(outputs, "detach"):  # torch.Tensor, without importing torch here
        outputs = outputs.detach().to("cpu").float().numpy()
    array = np.asarray(outputs, dtype=np.float32)
    if array.ndim == 0 or array.shape[0] != n_rows:
        raise ValueError(f"head input has shape {array.shape}, expected {n_rows} rows")
    if input_ndim == 2:
        return array.reshape(n_rows, -1)
    if array.ndim != input_ndim:
        raise ValueError(f"head expects rank {input_ndim} (n, T, C), got shape {array.shape}")
    return array


def read_list(source: str | list[str], what: str) -> list[str]:
    """A list of strings given inline, or read from a UTF-8 text file with one entry per line.

    Lines are split on ``\\n`` only (``str.splitlines`` would also split on characters such as U+2028 that are
    legitimate entries of OCR character sets); a trailing ``\\r`` and one final empty line are removed.

    Raises:
        FileNotFoundError: ``source`` is a path to a missing file (the message names ``what``).
        ValueError: the list is empty.
    """
    if isinstance(source, str):
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{what} file {path} does not exist")
        lines = [line.removesuffix("\r") for line in path.read_text(encoding="utf-8").split("\n")]
        items = lines[:-1] if lines and lines[-1] == "" else lines
    else:
        items = list(source)
    if not items:
        raise ValueError(f"{what} is empty")
    return items

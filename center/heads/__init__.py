"""Recognition heads: turn the last pipeline stage's output into one result per ROI.

Heads are built from the recognizer's ``head`` config through a registry keyed by its ``type``:

* ``embedding`` (:class:`vcascade.center.identity.IdentityHead`): re-identification against the recognizer's
  identity space shared by all its workers (:class:`vcascade.core.protocol.wire.EmbeddingOutput`); :class:`EmbeddingHead`
  is the same matching on a gallery in one process's memory (benchmarks),
* ``classifier`` (:class:`ClassifierHead`): top-k labels with scores (:class:`vcascade.core.protocol.wire.ClassifierOutput`),
* ``text`` (:class:`TextHead`): CTC greedy decoding of OCR output (:class:`vcascade.core.protocol.wire.TextOutput`).

Each head answers with its own typed output, tagged with the same name as its registry key, which goes into
:class:`vcascade.core.protocol.wire.Result` as it is. Adding a head: its config class in
:mod:`vcascade.core.schema.center` (the only place its name is written, in its ``type`` literal) and in
``HEAD_CONFIGS``, its module here and one :func:`head_registry` line in :data:`HEADS`, its output struct in
:mod:`vcascade.core.protocol.wire` (``HEAD_OUTPUTS``: the broker and the edge decode it and import no center code).
"""

from __future__ import annotations

from typing import Any, Callable

from vcascade.center.heads.base import Head, HeadContext, head_context, head_input, read_list
from vcascade.center.heads.classifier import ClassifierHead, softmax
from vcascade.center.heads.embedding import EPS, EmbeddingHead, l2_normalise
from vcascade.center.heads.text import (
    RegionTextHead,
    TextHead,
    ctc_classes,
    ctc_greedy_decode,
    output_classes,
    read_model_charset,
)
from vcascade.center.identity.head import IdentityHead
from vcascade.core.schema.base import family_tag
from vcascade.core.schema.center import HEAD_CONFIGS, ClassifierHeadConfig, EmbeddingHeadConfig, TextHeadConfig

HeadBuilder = Callable[[Any, HeadContext], Head]
"""Builds a head from its config (one of the ``*HeadConfig`` models) and the recognizer's context."""


def _embedding(cfg: EmbeddingHeadConfig, context: HeadContext) -> IdentityHead:
    return IdentityHead.from_config(cfg, context.recognizer, context.worker)


def _classifier(cfg: ClassifierHeadConfig, context: HeadContext) -> ClassifierHead:
    return ClassifierHead(read_list(cfg.labels, "classifier labels"), cfg.top_k, cfg.softmax)


def _text(cfg: TextHeadConfig, context: HeadContext) -> TextHead:
    if cfg.charset == "model":
        if context.model_path is None:
            raise ValueError("`charset: model` needs a recognizer with an ONNX `model` file; give a file or a list")
        charset = read_model_charset(context.model_path)
    else:
        charset = read_list(cfg.charset, "text charset")
    if context.text_regions is not None:  # a two-model recognizer: every region, boxes in crop pixels
        if context.model_path is None:
            raise ValueError("a text head of an ocr recognizer needs its recognition `model` file")
        input_hw, resize = context.text_regions
        return RegionTextHead(charset, output_classes(context.model_path), cfg.min_score, input_hw, resize)
    return TextHead(charset, cfg.min_score)


def head_registry(*heads: tuple[type, HeadBuilder]) -> dict[str, HeadBuilder]:
    """Head builders by their config class's ``type`` (:func:`vcascade.core.schema.base.family_tag`).

    Raises:
        ValueError: a config class of ``HEAD_CONFIGS`` has no builder here, or one here is not there.
    """
    by_type = {family_tag(config): builder for config, builder in heads}
    declared = {family_tag(config) for config in HEAD_CONFIGS}
    if set(by_type) != declared or len(by_type) != len(heads):
        raise ValueError(f"heads {sorted(by_type)} differ from the schema's {sorted(declared)}")
    return by_type


HEADS: dict[str, HeadBuilder] = head_registry(
    (EmbeddingHeadConfig, _embedding),
    (ClassifierHeadConfig, _classifier),
    (TextHeadConfig, _text),
)
"""Head builders by config ``type``, which is also the ``head`` tag of the head's output."""


def build_head(cfg, context: HeadContext | None = None) -> Head:
    """Build the head a recognizer's ``head`` config describes.

    Args:
        cfg: an ``EmbeddingHeadConfig``, ``ClassifierHeadConfig`` or ``TextHeadConfig`` (its ``type`` selects
            the builder in :data:`HEADS`).
        context: what the head may need from its recognizer (default: no ONNX model).

    Raises:
        KeyError: unknown ``type``. FileNotFoundError: a labels or charset file is missing. ValueError: empty
        labels or charset, ``charset: model`` without an ONNX model, or a model without a ``character`` property.
    """
    try:
        builder = HEADS[cfg.type]
    except KeyError:
        raise KeyError(f"unknown head type {cfg.type!r}; known: {sorted(HEADS)}") from None
    return builder(cfg, context or HeadContext())


__all__ = [
    "EPS", "HEADS", "ClassifierHead", "RegionTextHead", "EmbeddingHead", "Head", "HeadBuilder", "HeadContext", "TextHead",
    "build_head", "ctc_classes", "ctc_greedy_decode", "head_context", "head_input", "head_registry", "l2_normalise",
    "read_list",
    "read_model_charset", "softmax",
]

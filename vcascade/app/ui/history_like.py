"""``/api/history/search?like=<row id>`` (docs/HISTORY.md): "find similar" over the live view's read-only server.

The picture is the crop kept with a row (a sighting), found by the row's id through the evidence reader the
evidence route uses; the deployment's embedding recognizer embeds it and its identity space names the nearest
identities (:mod:`vcascade.app.like_image`, the code of ``vcascade search --like``), whose rows answer the query
with its other filters. The model loads once, on the first like-query, in this process; one embedding runs at a
time: a like-query arriving while another embeds is refused (:class:`LikeBusy`), not queued, so a client cannot
pile up CPU work on the view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vcascade.app.history_request import parse_int
from vcascade.app.history_search import Stores, evidence_file
from vcascade.app.like_image import Neighbour, decode_image, embedding_recognizer, load_embedder, nearest_identities
from vcascade.core.config import Deployment
from vcascade.edge.history.query import QueryError

MAX_LIKE_TOP = 20
"""Most identities one like-query follows (each is one timeline query of the stores)."""


class LikeRefused(QueryError):
    """A like-query that cannot be answered as asked (a 400); ``reason`` is its count's key."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LikeBusy(Exception):
    """Another like-query is embedding its picture now (a 503: one at a time, never queued)."""


@dataclass(frozen=True)
class LikeAsk:
    """A like-query's own parameters: the row whose crop is the picture, and at most how many identities."""

    ref: str
    top: int


def like_params(params: Mapping[str, Sequence[str]], ref_pattern: Callable[[str], object]) -> LikeAsk | None:
    """The ``like`` and ``like_top`` parameters (None: no ``like``); ``ref_pattern(ref)`` is falsy for an id that
    is not one.

    Raises:
        LikeRefused: ``like_top`` without ``like``, with ``identity``, outside 1..:data:`MAX_LIKE_TOP`, a malformed
            row id.
    """
    ref = (params.get("like") or [None])[0]
    top_text = (params.get("like_top") or [None])[0]
    if ref is None:
        if top_text is not None:
            raise LikeRefused("like_bad_request", "like_top needs like (a row id)")
        return None
    if params.get("identity"):
        raise LikeRefused("like_bad_request", "like and identity both name the identity: use one")
    if not ref_pattern(ref):
        raise LikeRefused("like_bad_request", f"like {ref[:130]!r}: not a row id")
    top = 5 if top_text is None else parse_int(top_text, "like_top")
    if not 1 <= top <= MAX_LIKE_TOP:
        raise LikeRefused("like_bad_request", f"like_top {top}: expected 1..{MAX_LIKE_TOP}")
    return LikeAsk(ref, top)


class LikeSearch:
    """The identities like a row's crop, for ``dep`` (its embedding recognizer, loaded on first use)."""

    def __init__(
        self, dep: Deployment, read_evidence: Callable[[Path, str, str], bytes], model_dir: str | None = None
    ) -> None:
        """``read_evidence(path, ref, image)``: the bytes of an evidence file, bounded (raises as it refuses).
        ``model_dir``: the folder searched first for the recognizer's model file (``--model-dir``; then
        ``$VCASCADE_MODEL_DIR`` and the user cache, :mod:`vcascade.core.runtime.models`)."""
        self.dep, self.model_dir = dep, model_dir
        self._read = read_evidence
        self._busy = threading.Lock()
        self._embed: Callable[[np.ndarray], np.ndarray] | None = None

    def neighbours(self, stores: Stores, ask: LikeAsk, budget_s: float) -> list[Neighbour]:
        """The identities like the crop of row ``ask.ref``, most similar first, at or above the recognizer's
        ``match_threshold``, at most ``ask.top``.

        Raises:
            LikeRefused: no embedding recognizer in the deployment, or no crop kept with the row, or it is no image.
            LikeBusy: another like-query is embedding. NoStore, StoreDown, OSError: as the evidence route.
            FileNotFoundError, RuntimeError: the model cannot be loaded or run.
        """
        try:
            name, rec_cfg = embedding_recognizer(self.dep, None)
        except QueryError as exc:
            raise LikeRefused("like_no_recognizer", str(exc).replace("--like", "like", 1)) from None
        path = evidence_file(stores, ask.ref, "crop", budget_s=budget_s)
        if path is None:
            raise LikeRefused("like_no_crop", f"like {ask.ref!r}: no crop kept with that row (or no such row)")
        image = decode_image(self._read(path, ask.ref, "crop.jpg"), f"like {ask.ref!r}: its crop")
        if not self._busy.acquire(blocking=False):
            raise LikeBusy("busy: another like-query is embedding its picture; ask again in a moment")
        try:
            if self._embed is None:
                self._embed = load_embedder(rec_cfg, self.model_dir)
            vector = self._embed(image)
        finally:
            self._busy.release()
        return nearest_identities(name, rec_cfg, vector, ask.top)

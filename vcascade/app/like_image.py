"""``vcascade search --like IMAGE``: which identities look like this picture (docs/HISTORY.md).

The deployment's embedding recognizer embeds the image as a worker embeds a crop (the same preprocessing,
model and split, here on the CPU in this process), and its identity space's store (the one its workers share)
returns the identities whose centroid (the normalised sum of their embeddings) is nearest by cosine similarity,
at or above the recognizer's ``match_threshold``; ``vcascade search`` then shows their timelines.

The center is reached through its lazy exports (:mod:`vcascade.center`), so a search without ``--like`` loads
no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

import vcascade.center as center
import vcascade.center.identity as identity_space
from vcascade.app.history_search import Stores, search
from vcascade.core.config import Deployment
from vcascade.edge.history.query import HistoryQuery, QueryError


@dataclass(frozen=True)
class Neighbour:
    """An identity like the image: its id and cosine similarity (-1..1) of its centroid to the image's embedding."""

    identity: int
    similarity: float


def read_image(path: Path) -> np.ndarray:
    """The image at ``path`` as (h, w, 3) uint8 BGR.

    Raises:
        QueryError: unreadable, or not an image OpenCV decodes (JPEG, PNG, ...).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise QueryError(f"--like {str(path)!r}: cannot read it: {exc.strerror}") from None
    return decode_image(data, f"--like {str(path)!r}")


def decode_image(data: bytes, what: str) -> np.ndarray:
    """The encoded image ``data`` as (h, w, 3) uint8 BGR.

    Raises:
        QueryError: naming ``what``: not an image OpenCV decodes (JPEG, PNG, ...).
    """
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise QueryError(f"{what}: not an image (no JPEG, PNG or other format OpenCV decodes)")
    return image


def embedding_recognizer(dep: Deployment, name: str | None) -> tuple[str, Any]:
    """The recognizer named ``name``, else the file's only one with an ``embedding`` head.

    Raises:
        QueryError: none, several and no name, or ``name`` is not an embedding recognizer of the file.
    """
    embedders = {n: cfg for n, cfg in dep.recognizers.items() if getattr(cfg.head, "type", None) == "embedding"}
    if name is not None:
        if name not in embedders:
            raise QueryError(f"--recognizer {name!r}: not an embedding recognizer of the file "
                             f"(embedding recognizers: {', '.join(sorted(embedders)) or 'none'})")
        return name, embedders[name]
    if len(embedders) != 1:
        raise QueryError("--like needs the file's embedding recognizer: "
                         + ("the file has none" if not embedders else
                            f"it has {len(embedders)} ({', '.join(sorted(embedders))}): name one with --recognizer"))
    return next(iter(embedders.items()))


def load_embedder(rec_cfg: Any, model_dir: str | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Load the recognizer's model on the CPU once; the function it returns embeds an image ((h, w, 3) uint8 BGR)
    as a worker embeds a crop: a unit (D,) float32 vector. Not safe for concurrent calls.

    Raises:
        FileNotFoundError: the model is missing; RuntimeError and the runtimes' errors: it fails to load.
    """
    points = rec_cfg.split_points
    devices = ["cpu"] * (1 if points == "auto" else len(points) + 1)
    stages = center.load_recognizer_stages(rec_cfg, devices, model_dir=model_dir)
    spec = center.PreprocessSpec.from_config(rec_cfg)
    on_torch = rec_cfg.type == "torch" and getattr(rec_cfg, "engine", "torch") == "torch"

    def embed_one(image: np.ndarray) -> np.ndarray:
        batch = center.stack_batch([center.to_input(image, spec)])
        activations: tuple = (center.to_device(batch, "cpu") if on_torch else batch,)
        for stage in stages:
            activations = stage(activations)
        out = activations[0]
        vector = np.asarray(out.detach().float().cpu().numpy() if hasattr(out, "detach") else out,
                            np.float32).ravel()
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector

    return embed_one


def embed(rec_cfg: Any, image: np.ndarray, model_dir: str | None = None) -> np.ndarray:
    """The recognizer's unit embedding of ``image`` ((h, w, 3) uint8 BGR): (D,) float32 (:func:`load_embedder`,
    loaded for this one image).

    Raises:
        FileNotFoundError: the model is missing; RuntimeError and the runtimes' errors: it fails to run.
    """
    return load_embedder(rec_cfg, model_dir)(image)


def nearest_identities(space: str, rec_cfg: Any, vector: np.ndarray, top: int) -> list[Neighbour]:
    """The live identities of ``space``'s store nearest to unit ``vector``, at or above the head's
    ``match_threshold``, most similar first, at most ``top``."""
    store = identity_space.build_store(rec_cfg.head.identity.store, space)
    try:
        identities, _ = store.changes(0)
    finally:
        store.close()
    ids, centroids = [], []
    for known in identities:
        if known.vector_sum is not None and known.state == "live" and len(known.vector_sum) == len(vector):
            norm = float(np.linalg.norm(known.vector_sum))
            if norm > 0:
                ids.append(known.identity_id)
                centroids.append(known.vector_sum / norm)
    if not ids:
        return []
    similarity = np.stack(centroids) @ vector
    order = np.argsort(-similarity)[:top]
    return [Neighbour(ids[i], float(similarity[i])) for i in order if similarity[i] >= rec_cfg.head.match_threshold]


def like_rows(stores: Stores, query: HistoryQuery, neighbours: list[Neighbour],
              budget_s: float | None = None) -> list[dict[str, Any]]:
    """The rows of each neighbour's identity answering ``query`` (its other filters; :func:`search`), grouped by
    neighbour, most similar first, each group oldest first; every row with ``like_identity`` and
    ``like_similarity``.

    Raises:
        As :func:`~vcascade.app.history_search.search`.
    """
    rows = []
    for neighbour in neighbours:
        found = search(stores, dataclasses.replace(query, identity=neighbour.identity), budget_s=budget_s)
        rows += [{**row, "like_identity": neighbour.identity, "like_similarity": neighbour.similarity}
                 for row in found]
    return rows

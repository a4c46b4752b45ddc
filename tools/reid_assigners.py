"""How a recognizer's workers give identity ids to ROI embeddings, behind one callable (tools/bench_reid.py).

* :class:`OneWorker`: one worker, one :class:`EmbeddingHead` gallery (the embedded gallery before issue 16).
* :class:`SeveralWorkers`: several workers, each its own :class:`EmbeddingHead` gallery numbering from 0, the
  broker dealing them micro-batches in turn (the bug of issue 16: one id names different objects).
* :class:`SharedSpace`: several workers, each with its local copy of the shared identity space
  (:class:`IdentitySpace`) synced through one embedded SQLite store (the default backend), optionally with a
  camera topology, optionally matching tracked ROIs by their track's aggregate (``tracks``, the default of
  ``identity.tracks``); every worker syncs as its background thread would, every ``sync_interval_s`` of stream
  time.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from vcascade.center.heads import EmbeddingHead
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.gallery import Gallery
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import Sighting
from vcascade.center.identity.sync import StoreSync
from vcascade.center.identity.topology import Topology
from vcascade.center.identity.tracks import TrackBook
from vcascade.core.schema.identity import TrackAggregateConfig

MAX_IDENTITIES = 10_000
"""The demo embedder's ``max_identities``."""
SYNC_INTERVAL_S = 0.2
"""The identity space's default ``sync_interval_s``."""
ID_BLOCK = 32
"""The identity space's default ``id_block``."""
RETENTION_S = 86_400.0
"""The identity space's default ``retention_s``."""
_SPACES = itertools.count()


class Assigner(Protocol):
    """Gives identity ids to a micro-batch of ROI embeddings, as the recognizer's workers would."""

    name: str
    comparisons: int
    """Embedding comparisons made so far (0 where not counted)."""

    def __call__(self, embeddings: np.ndarray, cameras: Sequence[str], pts_ms: np.ndarray,
                 tracks: Sequence[int] = (), scores: Sequence[float] = (), known: Sequence[int] = ()
                 ) -> np.ndarray:  # fmt: skip
        """(n,) int64 identity ids for (n, D) float32 unit embeddings of ROIs from ``cameras`` at ``pts_ms``, with
        their camera track ids, detection scores and the identity the edge knows for their track (-1: none; the
        ROI's ``track_identity_id``); the last three are used by the assigners that match tracks."""


class OneWorker:
    """One worker: one :class:`EmbeddingHead` gallery sees every ROI."""

    def __init__(self, threshold: float) -> None:
        self.name, self.comparisons = "1 worker", 0
        self.head = EmbeddingHead(threshold, MAX_IDENTITIES)

    def __call__(self, embeddings: np.ndarray, cameras: Sequence[str], pts_ms: np.ndarray, tracks=(),
                 scores=(), known=()) -> np.ndarray:  # fmt: skip
        self.comparisons += len(embeddings) * len(self.head)
        return np.array([out.identity_id for out in self.head(embeddings)], dtype=np.int64)


class SeveralWorkers:
    """``workers`` workers, each its own :class:`EmbeddingHead` gallery; micro-batches dealt round-robin."""

    def __init__(self, threshold: float, workers: int) -> None:
        self.name, self.comparisons = f"{workers} workers, own galleries", 0
        self.heads = [EmbeddingHead(threshold, MAX_IDENTITIES) for _ in range(workers)]
        self.turn = 0

    def __call__(self, embeddings: np.ndarray, cameras: Sequence[str], pts_ms: np.ndarray, tracks=(),
                 scores=(), known=()) -> np.ndarray:  # fmt: skip
        head = self.heads[self.turn % len(self.heads)]
        self.turn += 1
        self.comparisons += len(embeddings) * len(head)
        return np.array([out.identity_id for out in head(embeddings)], dtype=np.int64)


class SharedSpace:
    """``workers`` workers on one identity space: local copies synced through a SQLite store in a scratch folder.

    Micro-batches are dealt round-robin. Before each, every worker whose last sync cycle is
    :data:`SYNC_INTERVAL_S` of stream time old runs one, in worker order (the background threads' pace, replayed
    deterministically; ROIs arrive as fast as the video plays). Ids are scored as results report them (a
    provisional or later-merged id counts as is).

    Args:
        threshold: match threshold (cosine).
        workers: number of workers.
        topology: camera topology for pruning (None: compare with every identity).
        tracks: match tracked ROIs by their track's aggregate (``identity.tracks`` defaults); False: each alone.
        track_threshold: the aggregates' match threshold (None: ``threshold``).
        store_path: the SQLite store's file (None: one in a scratch folder, removed by :meth:`close`); a store
            kept between assigners is the same space met again (``--replays``).
        centroid_window: looks an identity's centroid remembers (``identity.centroid_window``; 0: all).
        gallery_size, gallery_diversity: exemplars per identity and the cosine under which a look is kept
            (``identity.gallery``; size 0: none), the store keeping ``gallery_size - 1`` besides the enrolment.
    """

    def __init__(self, threshold: float, workers: int, topology: Topology | None = None, tracks: bool = False,
                 store_path: Path | None = None, track_threshold: float | None = None,
                 centroid_window: int = 0, gallery_size: int = 0, gallery_diversity: float = 1.0,
                 ) -> None:  # fmt: skip
        self.name = (f"{workers} worker{'s' if workers > 1 else ''}, shared space"
                     + (" + topology" if topology is not None else "") + (" + tracks" if tracks else "")
                     + (f" + window {centroid_window}" if centroid_window else "")
                     + (f" + gallery {gallery_size}" if gallery_size else ""))
        self.comparisons = 0
        self._folder = tempfile.TemporaryDirectory(prefix="bench-reid-")
        store_path = store_path or Path(self._folder.name) / "identities.sqlite"
        space_name = "bench" if store_path.parent != Path(self._folder.name) else f"bench-{next(_SPACES)}"
        cfg = TrackAggregateConfig()
        books = [TrackBook(cfg.max_tracks, cfg.ttl_s, cfg.outlier_sigma) if tracks else None for _ in range(workers)]
        self.spaces = [IdentitySpace(threshold, MAX_IDENTITIES, "exact", topology, book, cfg.revise_margin,
                                     track_threshold, centroid_window=centroid_window,
                                     gallery=Gallery(gallery_size, gallery_diversity) if gallery_size else None)
                       for book in books]
        self.syncs = [
            StoreSync(space, SqliteStore(store_path, space_name, exemplars=max(gallery_size - 1, 0)),
                      IdentityTelemetry(f"bench-reid-{i}"),
                      SYNC_INTERVAL_S, ID_BLOCK, RETENTION_S, MAX_IDENTITIES)
            for i, space in enumerate(self.spaces)
        ]
        for sync in self.syncs:
            sync.cycle()  # as at worker start: reserve ids, load what the store holds
        self._synced_ms = [0.0] * workers
        self.turn = 0

    def __call__(self, embeddings: np.ndarray, cameras: Sequence[str], pts_ms: np.ndarray, tracks=(),
                 scores=(), known=()) -> np.ndarray:  # fmt: skip
        worker = self.turn % len(self.spaces)
        self.turn += 1
        now_ms = float(np.min(pts_ms))
        for other, sync in enumerate(self.syncs):
            if now_ms - self._synced_ms[other] >= SYNC_INTERVAL_S * 1000.0:
                sync.cycle()
                self._synced_ms[other] = now_ms
        wall_s = time.time()
        sightings = [Sighting(camera, float(t_ms), wall_s) for camera, t_ms in zip(cameras, pts_ms)]
        keys = [(camera, int(track)) if track >= 0 else None for camera, track in zip(cameras, tracks)] or None
        outputs, stats = self.spaces[worker].match(embeddings, sightings, keys, list(scores) or None,
                                                   list(known) or None)
        self.comparisons += stats.comparisons
        return np.array([out.identity_id for out in outputs], dtype=np.int64)

    def close(self) -> None:
        """Push what is left (as a worker's clean stop does), then remove the scratch folder (its store)."""
        for sync in self.syncs:
            sync.cycle()
        self._folder.cleanup()

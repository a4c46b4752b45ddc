"""The embedding head on a shared identity space (``type: embedding``): what the worker's head thread calls.

Turns the last stage's (n, D) embeddings into one :class:`vcascade.core.protocol.wire.EmbeddingOutput` per ROI by
matching them in the worker's :class:`vcascade.center.identity.space.IdentitySpace`, whose background
:class:`vcascade.center.identity.sync.StoreSync` shares it with every other worker of the recognizer through
the configured store (docs/IDENTITY.md).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from vcascade.center.identity.backends import build_store
from vcascade.center.identity.gallery import Gallery
from vcascade.center.identity.guard import IdGuard
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.store import IdentityStore, Sighting
from vcascade.center.identity.sync import StoreSync
from vcascade.center.identity.topology import Topology
from vcascade.center.identity.tracks import TrackBook
from vcascade.center.identity.vectors import l2_normalise
from vcascade.core.protocol.wire import EmbeddingOutput, Roi
from vcascade.core.state_dir import state_path


class IdentityHead:
    """Re-identification against the recognizer's deployment-wide identity space.

    Args:
        space: the local copy of the space.
        sync: its background sync (started here: one synchronous cycle loads the stored identities first).
        telemetry: the worker's identity metrics.
        clock: ``stream`` (a sighting's time is the ROI's PTS) or ``capture`` (its capture wall time).
    """

    input_ndim = 2
    """Takes (n, D) embeddings (see :class:`vcascade.center.heads.base.Head`)."""

    def __init__(self, space: IdentitySpace, sync: StoreSync, telemetry: IdentityTelemetry,
                 clock: str = "stream") -> None:  # fmt: skip
        self.space, self.sync, self.telemetry, self.clock = space, sync, telemetry, clock
        sync.start()

    @classmethod
    def from_config(cls, cfg: Any, space_name: str, worker: str, store: IdentityStore | None = None) -> "IdentityHead":
        """Build from an ``EmbeddingHeadConfig``.

        Args:
            cfg: the head config (``match_threshold``, ``max_identities``, ``identity``).
            space_name: the identity space (the recognizer's name).
            worker: the worker's name (metrics label).
            store: a store to use instead of the configured one (tests).

        Raises:
            ValueError: unknown index kind. The store's connection errors are not raised: a store that is
            down at start leaves the space out of sync (provisional results) until it answers.
        """
        ident = cfg.identity
        topology = None if ident.topology is None else Topology.from_config(ident.topology)
        tracks = ident.tracks
        book = TrackBook(tracks.max_tracks, tracks.ttl_s, tracks.outlier_sigma) if tracks.enabled else None
        space = IdentitySpace(cfg.match_threshold, cfg.max_identities, ident.index, topology, book,
                              tracks.revise_margin, tracks.match_threshold,
                              centroid_window=ident.centroid_window,
                              gallery=Gallery(ident.gallery.size, ident.gallery.diversity) if ident.gallery.size
                              else None)  # fmt: skip
        telemetry = IdentityTelemetry(worker)
        guard = IdGuard(state_path(f"identity-ids.{space_name}.{worker}.json"), telemetry)
        store = store or build_store(ident.store, space_name, max(ident.gallery.size - 1, 0))
        sync = StoreSync(space, store, telemetry, ident.sync_interval_s, ident.id_block, ident.retention_s,
                         cfg.max_identities, guard=guard)
        return cls(space, sync, telemetry, "stream" if topology is None else ident.topology.clock)

    def __call__(self, embeddings: np.ndarray, rois: Sequence[Roi] | None = None) -> list[EmbeddingOutput]:
        """Match (or enrol) each row, in row order.

        Args:
            embeddings: (n, D) float array (any scale; L2-normalised here).
            rois: the n ROIs (camera and time of each sighting, track and detection score); None: unknown
                camera, time now, untracked.

        Returns:
            One output per row: identity id (negative while provisional; a tracked ROI's is its track's),
            cosine similarity (1.0 when enrolled), enrolled, provisional, merged_from, the crop's own match.

        Raises:
            ValueError: not 2-D, or D differs from the space's.
        """
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings must be (n, D), got shape {embeddings.shape}")
        tracks = None if rois is None else [(r.camera, r.track_id) if r.track_id >= 0 else None for r in rois]
        scores = None if rois is None else [r.score for r in rois]
        carried = None if rois is None else [r.track_identity_id for r in rois]
        outputs, stats = self.space.match(l2_normalise(embeddings), self._sightings(rois, len(embeddings)), tracks,
                                          scores, carried)
        self.telemetry.matched(stats, len(self.space))
        return outputs

    def close(self) -> None:
        """Push what is left to the store and stop the sync thread."""
        self.sync.close()

    def _sightings(self, rois: Sequence[Roi] | None, n: int) -> list[Sighting]:
        wall_s = time.time()
        if rois is None:
            return [Sighting("", 1000.0 * wall_s, wall_s)] * n
        at = (lambda roi: roi.stream_ts_ms) if self.clock == "stream" else (lambda roi: roi.capture_unix_ms)
        return [Sighting(roi.camera, float(at(roi)), wall_s) for roi in rois]

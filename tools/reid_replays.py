"""Returning objects: the scenario replayed several times into one identity store (tools/bench_reid.py ``--replays``).

Each replay is the scenario's ROIs again, answered by freshly started workers that load the store the earlier
replays left (a restarted recognizer meeting the same objects another day); their tracks are new tracks (the
edge's tracker counts on), so nothing but the store connects a replay to the earlier ones. Replays cycle through
:data:`VARIANTS` versions of the crops: the crops as cut, then the same detections with their boxes a little
off, as a live edge's detector draws them on another pass (each side moved in by up to :data:`JITTER` of the box,
a seeded draw per version), embedded again (once per version, for every assigner). After replays 1, 5 and 10 (or those asked for) it reports:

* ``identities``: live identities in the store, and ``per_object``: that divided by the true objects;
* ``new``: identities the latest replay added (live after it minus live before it): 0 when every object already
  enrolled was recognised;
* ``agreement``: cross-camera agreement of the latest replay: of the pairs of ROIs of one true object seen on two
  different cameras, the fraction answered with one identity (the pairwise cross-camera recall of
  tools/reid_metrics.py);
* ``idf1`` of the latest replay.

The ``threshold`` is the head's ``match_threshold``; the track assigners match aggregates at the default
``identity.tracks.match_threshold``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.reid_assigners import SharedSpace
from tools.reid_metrics import quality

from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import LIVE
from vcascade.core.schema.identity import TrackAggregateConfig

TRACK_OFFSET = 1_000_000
"""Added to the track ids of each replay: every replay's tracks are new to the workers."""
JITTER = 0.08
"""Largest fraction of a crop's width (height) a replay trims from its left or right (top or bottom) side."""
VARIANTS = 3
"""Versions of the crops the replays cycle through (replay k shows version (k - 1) mod VARIANTS; 0: as cut)."""


def jittered(crops: Sequence[np.ndarray], seed: int) -> list[np.ndarray]:
    """Each (h, w, 3) crop with every side trimmed by a random 0..:data:`JITTER` of its size (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for crop in crops:
        h, w = crop.shape[:2]
        top, bottom = (rng.uniform(0, JITTER, 2) * h).astype(int)
        left, right = (rng.uniform(0, JITTER, 2) * w).astype(int)
        out.append(crop[top:max(top + 1, h - bottom), left:max(left + 1, w - right)])
    return out


def live_identities(path: Path) -> int:
    """Live identities in the replays' SQLite store."""
    store = SqliteStore(path, "bench")
    try:
        records, _ = store.changes(0)
    finally:
        store.close()
    return sum(record.state == LIVE for record in records)


def variants(rois: Sequence[Any], embeddings: np.ndarray, embed) -> list[np.ndarray]:
    """The (N, D) embeddings of each version of the crops: ``embeddings`` (as cut), then ``embed`` (crops to unit
    rows) of each jittered version."""
    return [embeddings] + [embed(jittered([r.crop for r in rois], k)) for k in range(1, VARIANTS)]


def replays(rois: Sequence[Any], looks: Sequence[np.ndarray], threshold: float, workers: int, tracks: bool,
            report_after: Sequence[int], assign, track_threshold: float | None = None, **space: Any
            ) -> list[dict[str, Any]]:  # fmt: skip
    """Replay ``rois`` (``LabelledRoi``) ``max(report_after)`` times into one store; one row per replay in
    ``report_after`` (see the module docstring). ``looks``: :func:`variants`; ``assign``: tools/bench_reid.py's
    ``assign``; ``track_threshold``: the aggregates' (None: ``identity.tracks``' default); ``space``: more
    :class:`tools.reid_assigners.SharedSpace` options (``centroid_window``, ``gallery_size``,
    ``gallery_diversity``)."""
    track_threshold = TrackAggregateConfig().match_threshold if track_threshold is None else track_threshold
    labelled = np.array([r.truth >= 0 for r in rois])
    truth = np.array([r.truth for r in rois])[labelled]
    camera = np.array([r.camera for r in rois])[labelled]
    objects = len(np.unique(truth))
    rows, before = [], 0
    with tempfile.TemporaryDirectory(prefix="bench-reid-replays-") as folder:
        path = Path(folder) / "identities.sqlite"
        for replay in range(1, max(report_after) + 1):
            moved = [dataclasses.replace(r, track_id=r.track_id + replay * TRACK_OFFSET) if r.track_id >= 0 else r
                     for r in rois]  # fmt: skip
            assigner = SharedSpace(threshold, workers, tracks=tracks, store_path=path, track_threshold=track_threshold,
                                   **space)
            predicted = assign(assigner, looks[(replay - 1) % len(looks)], moved)[labelled]
            assigner.close()
            live = live_identities(path)
            if replay in report_after:
                scores = quality(truth, predicted, camera)
                rows.append({"assigner": assigner.name, "threshold": threshold, "replay": replay, "identities": live,
                             "per_object": live / max(objects, 1), "new": live - before,
                             "agreement": scores["cross_recall"], "idf1": scores["idf1"]})
            before = live
    return rows


def print_replays(rows: Sequence[dict[str, Any]]) -> None:
    """One line per (assigner, replay)."""
    print(f"{'assigner':39s} {'thr':>5s} {'replay':>6s} {'ids':>5s} {'ids/obj':>7s} {'new':>4s} {'xcamR':>6s} "
          f"{'IDF1':>6s}")
    for row in rows:
        print(f"{row['assigner']:39s} {row['threshold']:5.2f} {row['replay']:6d} {row['identities']:5d} "
              f"{row['per_object']:7.2f} {row['new']:4d} {row['agreement']:6.3f} {row['idf1']:6.3f}")

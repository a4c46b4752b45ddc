"""tools/bench_match.py --quick: the ANN index against exact search on a gallery built from real embeddings."""

from __future__ import annotations


def test_quick_run_reports_recall_and_per_roi_times_side_by_side(run_quick):
    stdout, result = run_quick("bench_match", 240)
    assert result["identities"] == 10_000 and result["dim"] == 1280  # the demo embedder's dimension
    assert result["real_crops"] == 48 and result["real_deviations"] > 0
    assert result["recall_at_1"] >= 0.99
    # the gallery is crowded like real crops (cosine well above 0) yet re-observations mostly find themselves
    assert 0.3 < result["pair_cosine_median"]["gallery"] < 0.95
    assert result["exact_top1_is_source"] > 0.5
    for batch in ("1", "8"):  # one core's CPU time: the graph search beats the full scan even at 10,000
        assert result["per_roi"]["ann"][batch]["cpu_ms"] < result["per_roi"]["exact"][batch]["cpu_ms"]
    assert "recall@1 (ann vs exact)" in stdout

"""tools/bench_scale.py: its statistics and checks on hand-made rows, the trace and service times it reads,
and ``--quick`` end to end (real brokers, edges and calibrated workers; about a minute each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from tools import scale_stats as stats
from tools.bench_scale import Setting, capacity_rois_per_s, deployment, failures, keda_threshold, service_table
from tools.scale_trace import REFRESH_TRACE, TRACE, composition, load_trace

from vcascade.core.config import Deployment


def test_jain_index_is_one_when_fair_and_one_over_n_when_one_takes_all():
    assert stats.jain_index([1.0, 1.0, 1.0]) == 1.0
    assert stats.jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert stats.jain_index([]) == 1.0


def test_conservation_finds_the_camera_whose_books_do_not_balance():
    cameras = {"a": {"sent": 3, "results": 2, "drops": {"stale": 1}}, "b": {"sent": 3, "results": 1, "drops": {}}}
    assert stats.unbalanced(cameras) == ["b"]


def test_latency_summary_counts_goodput_and_late_share_against_the_deadline():
    summary = stats.latency_summary([100.0, 200.0, 900.0, 1500.0], deadline_ms=1000.0, duration_s=2.0)
    assert summary["goodput"] == 1.5 and summary["late_share"] == 0.25


def test_first_sightings_served_counts_tracks_whose_first_roi_was_answered_in_time():
    results = [("c", 100.0, 1.0, "first", 1), ("c", 2000.0, 1.0, "first", 2), ("c", 100.0, 1.0, "better", 3)]
    drops = [("c", "stale", "first", 4), ("c", "stale", "refresh", 1)]
    assert stats.first_sightings_served(results, drops, deadline_ms=1000.0) == pytest.approx(1 / 3)


def test_late_results_hops_are_averaged_over_every_edges_late_results():
    edges = [{"broker_queue": 900.0, "end_to_end": 2400.0, stats.LATE_COUNT_KEY: 2}, {"broker_queue": 100.0,
             "end_to_end": 1200.0, stats.LATE_COUNT_KEY: 1}, {}]  # fmt: skip
    assert stats.mean_hops_ms(edges) == {"broker_queue": 333.3, "end_to_end": 1200.0}
    assert stats.mean_hops_ms([{}, {}]) == {}


def test_recovery_time_is_when_served_rate_is_back_for_good():
    done = [t / 100 for t in range(1000)]  # 100/s for 10 s ...
    done = [t for t in done if not 5.0 <= t < 6.2]  # ... nothing served from the kill at 5 s to 6.2 s
    assert stats.recovery_time_s(done, kill_s=5.0, duration_s=10.0) == pytest.approx(1.5)


def _row(**fields) -> dict:
    row = {"cameras": 1000, "brokers": 1, "load": 1.0, "kill_broker": False, "jain": 1.0, "goodput": 200.0,
           "late_share": 0.0, "first_sightings_served": 1.0, "unbalanced_cameras": 0, "curve": [],
           "elastic": False}  # fmt: skip
    return {**row, **fields}


def test_checks_pass_and_each_broken_target_is_reported():
    assert failures([_row(), _row(load=1.5, goodput=190.0, late_share=0.005)]) == []
    assert len(failures([_row(unbalanced_cameras=2)])) == 1
    assert "Jain" in failures([_row(jain=0.95)])[0]
    broken = failures([_row(), _row(load=1.5, goodput=150.0, late_share=0.02, first_sightings_served=0.9)])
    assert len(broken) == 3 and "goodput" in broken[0] and "late share" in broken[1] and "first sightings" in broken[2]


def test_day_night_check_fails_when_the_elastic_pool_saves_no_replica_seconds():
    curve = [[0.0, 0.2], [1.0, 0.2]]
    fixed = _row(curve=curve, replica_s=120.0, jain=0.5, load=1.5, goodput=1.0)  # steady-load checks do not apply
    assert failures([fixed, _row(curve=curve, elastic=True, replica_s=80.0)]) == []
    assert "replica-s" in failures([fixed, _row(curve=curve, elastic=True, replica_s=120.0)])[0]


def test_the_two_traces_differ_by_refreshes_only():
    assert composition(TRACE) == "18 ROIs in 9.36 s: 15 first, 3 better"
    assert composition(REFRESH_TRACE) == "28 ROIs in 9.36 s: 15 first, 10 refresh, 3 better"


def test_keda_threshold_is_a_workers_credits_plus_one_micro_batch():
    dep = deployment(Setting(10, 1, 1, 3, 1.0, 5.0), service_table(), 1000.0)
    assert keda_threshold(dep) == dep["workers"]["w1"]["credits"] + dep["workers"]["w1"]["max_batch"] == 24


@pytest.mark.parametrize("path", [TRACE, REFRESH_TRACE])
def test_trace_service_times_and_deployment_are_valid(path):
    trace, length_s = load_trace(path)
    assert len(trace) >= 10 and 9.0 < length_s < 11.0 and {r.send_reason for r in trace} <= {"first", "better", "refresh"}
    table = service_table()
    assert capacity_rois_per_s(1, table) == pytest.approx(8 / table[8] * 1000.0)
    dep = Deployment.model_validate(deployment(Setting(50, 2, 2, 3, 1.0, 5.0), table, 1000.0))
    assert len(dep.cameras) == 50 and len(dep.cameras_of("e1")) == 25 and dep.recognizers["sim"].type == "calibrated"


def test_quick_run_meets_its_targets_and_balances_every_cameras_books(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench_scale", "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["load"] for r in rows] == [1.0, 1.5] and all(r["cameras"] == 1000 for r in rows)
    assert all(r["unbalanced_cameras"] == 0 and r["results"] > 0 for r in rows)


def test_day_night_quick_run_scales_real_workers_and_uses_fewer_replica_seconds_than_the_fixed_pool(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench_scale", "--day-night", "--quick", "--json",
                           str(out)], capture_output=True, text=True, timeout=600, cwd=REPO, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fixed, elastic = json.loads(out.read_text())
    assert not fixed["elastic"] and elastic["elastic"] and fixed["curve"] == elastic["curve"]
    assert all(r["unbalanced_cameras"] == 0 and r["results"] > 0 for r in (fixed, elastic))
    assert {n for _, n in fixed["replicas"]} == {3}
    assert max(n for _, n in elastic["replicas"]) > 1  # the day's backlog added workers ...
    assert elastic["replica_s"] < fixed["replica_s"]  # ... not for the whole run
    assert 0 < elastic["utilisation"] <= 1 and 0 < fixed["utilisation"] <= 1

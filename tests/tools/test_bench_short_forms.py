"""Every benchmark of tools/ in a short form, so one that breaks fails the suite (issue 32): each runs as its
command line runs it, on a small setting, and the test checks what holds on any host (the run ends, its report
has every part, counts balance, ratios are the quotients they claim to be), never a speed: the figures themselves
are in docs/BENCHMARKS.md. The benchmarks with a ``--quick`` form have their own tests beside this file
(bench_ingest, bench_match, bench_reid, bench_scale); gpu_center needs a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_tool(*args: str, timeout_s: int = 300) -> subprocess.CompletedProcess:
    """``python -m tools.<args>`` from the repository root, as docs/BENCHMARKS.md runs it."""
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout_s,
                          cwd=REPO, check=False)  # fmt: skip


def test_bench_routing_prints_each_workload_against_any():
    proc = run_tool("tools.bench_routing", "--rois", "400", "--reps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split(":")[0].strip(): line for line in proc.stdout.splitlines()}
    assert set(lines) == {"any", "routed", "absent"}
    assert "1.00 x any" in lines["any"]


def test_bench_broker_compares_the_broker_with_zmq_proxy_and_the_python_floor():
    proc = run_tool("tools.bench_broker", "--seconds", "0.3", "--reps", "1", "--floor", "--rate", "100", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    tp = res["throughput"]
    assert set(tp) == {"proxy", "broker", "floor"}
    assert all(tp[t]["cpu_us_per_roi"] >= tp[t]["main_cpu_us_per_roi"] > 0 for t in tp), tp
    assert res["ratio"] == pytest.approx(tp["broker"]["msgs_s"] / tp["proxy"]["msgs_s"])
    assert res["ratios"]["floor"] == pytest.approx(tp["floor"]["msgs_s"] / tp["proxy"]["msgs_s"])
    assert res["latency"]["rate_msgs_s"] == 100 and res["latency"]["drops"] == 0
    assert all(res["latency"]["rtt_ms"][t]["n"] > 0 for t in tp)
    assert res["ttl_ms"] > 0  # ROIs with a deadline, as edges send them


def test_bench_broker_steps_times_each_step_of_the_loop_against_a_reference():
    """The reference is this checkout's own interpreter here: the mechanism, not a comparison, is under test."""
    proc = run_tool("tools.bench_broker_steps", "--rois", "50", "--reference", sys.executable, "--floor",
                    "--json", "-")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    (only,) = res["rounds"]
    assert set(only) == {"broker", "floor", "reference"} and res["rois"] == 50
    for target, steps in res["mean_us"].items():
        assert len(steps) == 6 and all(us > 0 for us in steps.values()), (target, steps)


def test_bench_analytics_reports_the_cost_ratio_and_its_verdict(tmp_path, models_dir):
    out = tmp_path / "analytics.json"
    proc = run_tool("tools.bench_analytics", "--model-dir", str(models_dir), "--frames", "20",
                    "--synthetic-tracks", "10", "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["lines"] == 10 and result["zones"] == 10 and result["synthetic"]["frames"] > 0
    assert result["within_goal"] == (result["video"]["ratio"] <= result["goal_ratio"])
    assert proc.returncode == (0 if result["within_goal"] else 1), proc.stderr[-3000:]


@pytest.mark.timeout(900)
def test_bench_runs_every_section_with_the_edge_variants_and_balances_the_books(tmp_path, models_dir):
    """The headline benchmark (tools/bench.py) and its variants (issue 32) in one run, as each of its sections and
    options runs once: the calibration and the baseline as child processes, both cascades through ``vcascade run``
    with motion gating and an int8 copy made for the run (2 calibration frames) on a static clip of 2 segments held
    1 s each, the live section on that clip, plain, gated and at half the detection rate with a 320 input, 1 camera
    of 3 s each, the report and its plot. The copy, the 320 model and the clip are made, gated runs skip the held
    frames and the half-rate run every other frame and say so, the floor charges detection to the frames detected,
    every frame and ROI is accounted for. (Two runs before, one of them the plain variant on the demo clip: the
    same sections and checks, a calibration and two ``vcascade run`` more.)"""
    from tools.bench import CASCADE_STEPS, floor_fps
    from tools.bench_live import within_budgets

    out = tmp_path / "bench"
    proc = run_tool("tools.bench", "--model-dir", str(models_dir), "--cameras", "1", "--frames", "100", "--cores", "2",
                    "--sections", "calibrate,baseline,cascade,live", "--variant", "motion+int8", "--clip", "static",
                    "--static-segments", "2", "--static-still-s", "1", "--int8-calibration-frames", "2",
                    "--live-clips", "static", "--live-variants", "plain,motion,fps12.5+size320", "--live-seconds", "3",
                    "--live-max-cameras", "1", "--out", str(out), timeout_s=840)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "bench.json").read_text())
    assert (report["variant"], report["clip"]) == ("motion+int8", "static")
    assert report["made"] == {"static_clip": {"segments": 2, "still_s": 1.0}, "int8": {"calibration_frames": 2},
                              "input_sizes": [320]}
    cal = report["calibrate"]
    assert cal["frames"] == 100 and cal["rois"] > 0 and cal["per_frame_ms"]["gate"] > 0
    assert report["baseline"]["frames"] == 100 and report["baseline"]["rois"] > 0
    for policy in ("track", "every_detection"):
        run = report["cascade"][policy]
        assert run["frames"] == 100 and 0 < run["detected"] <= 80  # the held frames are still
        assert run["sent"] > 0 and run["sent"] == run["results"] + run["drops"]  # every ROI answered or dropped
        floor = floor_fps(cal, run["frames"], run["results"], 2, (*CASCADE_STEPS, "gate"), detected=run["detected"])
        assert run["floor_fps"] == pytest.approx(floor)
    assert report["cascade"]["track"]["sent"] <= report["cascade"]["every_detection"]["sent"]
    live = report["live"]
    assert live["seconds"] == 3 and set(live["clips"]) == {"static"}
    for variant, found in live["clips"]["static"].items():
        (run,) = found["runs"].values()
        assert run["frames"] > 0
        assert run["detected"] + run["still"] + run["skipped"] + run["rate_skipped"] == run["frames"]
        assert (run["still"] > 0) == (variant == "motion")
        assert (run["rate_skipped"] > 0) == (variant == "fps12.5+size320")
        assert run["sent"] == run["results"] + run["drops"]
        assert run["within"] == within_budgets(run) and found["sustained_cameras"] == int(run["within"])
        assert run["busiest"] in ("edge edge-1", "worker worker-1") and run["load_before"] > 0
    assert (out / "bench.png").stat().st_size > 10_000


@pytest.mark.timeout(900)
def test_bench_track_policy_sends_fewer_rois_with_the_track_policy_and_counts_both_runs(tmp_path, models_dir):
    """Both ``vcascade run``s of the demo on 60 frames per camera (on 20 or 25 frames bikes.mp4 gave no ROI);
    the ratio is the quotient of the two rates."""
    out = tmp_path / "track.json"
    proc = run_tool("tools.bench_track_policy", "--model-dir", str(models_dir), "--frames", "60", "--json", str(out),
                    timeout_s=840)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = json.loads(out.read_text())
    every, track = section["every_detection"], section["track"]
    assert every["video_min"] == track["video_min"] > 0  # the same frames under both policies
    assert 0 < track["sent"] <= every["sent"] and every["results"] <= every["sent"] and track["results"] <= track["sent"]
    assert section["ratio"] == pytest.approx(every["rois_per_min"] / track["rois_per_min"])
    assert "ratio every_detection / track" in proc.stdout


@pytest.mark.timeout(900)
def test_bench_preview_measures_an_idle_and_a_viewer_phase(tmp_path, models_dir):
    """One idle and one viewer phase of 2 s on the live demo camera: the viewer gets previews, both phases
    detect frames, and the ratio is the quotient of the two phases' CPU per frame."""
    out = tmp_path / "preview.json"
    proc = run_tool("tools.bench_preview", "--model-dir", str(models_dir), "--phase-s", "2", "--rounds", "1",
                    "--json", str(out), timeout_s=840)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [p["kind"] for p in report["phases"]] == ["idle", "viewer"]
    summary = report["summary"]
    assert summary["viewer"]["previews"] > 0 and summary["idle"]["frames"] > 0 and summary["viewer"]["frames"] > 0
    ratio = summary["viewer"]["cpu_ms_per_frame"] / summary["idle"]["cpu_ms_per_frame"]
    assert summary["ratio_viewer_to_idle"] == pytest.approx(ratio)
    assert summary["loop_thread"]["preview_ms"] > 0


@pytest.mark.timeout(900)
def test_bench_center_measures_stages_stage_group_and_worker_once_each(tmp_path):
    """Micro-batches of 4, 2 per measurement, 8 ROIs, one round: every measure of the report is there."""
    out = tmp_path / "center.json"
    proc = run_tool("tools.bench_center", "--batch", "4", "--batches", "2", "--rois", "8", "--rounds", "1",
                    "--out", str(out), timeout_s=840)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["split_points"]) == 1  # two stages
    stages, worker = result["stages"], result["worker"]
    assert (stages["batch"], stages["batches"], stages["rounds"]) == (4, 2, 1)
    for key in ("bare", "engine_k1", "engine_k2"):
        assert stages[f"{key}_rounds"] == [stages[key]] and stages[key] > 0  # one round: the best is that round
    assert stages["engine_k2_stage_group"] > 0 and stages["link_ms_mean"] > 0
    assert worker["worker"] == max(worker["worker_rounds"]) > 0 and worker["bare_loop"] == max(worker["bare_loop_rounds"])


def test_bench_privacy_reports_the_redaction_against_the_detector(tmp_path, models_dir):
    """20 frames of bikes.mp4: the per-frame and per-crop figures are there and the ratios are their quotients."""
    out = tmp_path / "privacy.json"
    proc = run_tool("tools.bench_privacy", "--model-dir", str(models_dir), "--frames", "20", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    per_frame = result["cpu_ms_per_frame"]
    assert result["frames"] == 20 and per_frame["detect"] > 0 and per_frame["faces"] > 0
    redaction_ms = per_frame["mask"] + per_frame["faces"]
    assert result["redaction_ms_per_frame"] == pytest.approx(redaction_ms, abs=0.002)
    assert result["frame_ratio"] == pytest.approx(redaction_ms / per_frame["detect"], abs=0.002)
    if result["crops"]:
        assert result["redaction_ms_per_crop"] == pytest.approx(redaction_ms * 20 / result["crops"], rel=0.01)
    assert per_frame["text"] > 0 and result["text_ratio"] == pytest.approx(per_frame["text"] / per_frame["detect"],
                                                                            abs=0.002)


def test_bench_text_reads_plates_with_both_recognizers_and_reports_each_height(tmp_path, models_dir):
    out = tmp_path / "text.json"
    proc = run_tool("tools.bench_text", "--model-dir", str(models_dir), "--samples", "8", "--heights", "12,20",
                    "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["samples"] == 8 and report["vehicle_crops"] > 0
    assert set(report["by_height"]) == {"12", "20"} and all(row["n"] == 4 for row in report["by_height"].values())
    for row in [*report["by_height"].values(), report["at_16px_or_more"]]:
        for name in ("single", "pipeline", "pipeline_any_region"):
            assert 0.0 <= row[name]["exact"] <= 1.0 and row[name]["cer"] >= 0.0
        assert row["pipeline_any_region"]["exact"] >= row["pipeline"]["exact"]  # the best reading is a region
    ms = report["ms_per_crop"]
    assert report["cost_ratio"] == round(ms["pipeline"] / ms["single"], 2)
    goal = report["at_16px_or_more"]["pipeline"]["exact"] >= 0.9
    assert proc.returncode == (0 if goal else 1), proc.stderr[-3000:]
    sizes = report["crop_size"]  # the per-route crop size: as cut against the default 224 px
    assert sizes["max_side_px"] == 224 and set(sizes["as_cut"]["by_height"]) == {"12", "20"}
    assert sizes["bytes_ratio"] == round(sizes["shrunk"]["bytes_per_roi"] / sizes["as_cut"]["bytes_per_roi"], 3)
    assert 0 < sizes["shrunk"]["bytes_per_roi"] <= sizes["as_cut"]["bytes_per_roi"]
    assert sizes["as_cut"]["edge_cpu_ms_per_crop"] > 0 and sizes["shrunk"]["edge_cpu_ms_per_crop"] > 0
    assert "single exact" in run_tool("tools.bench_text", "--model-dir", str(models_dir), "--samples", "2").stdout


def test_bench_motion_compares_gated_with_every_frame_detection_on_both_clips(tmp_path, models_dir):
    """Two segments of the static clip (made by the benchmark itself): both clips run, both modes see every frame,
    every-frame detection runs on every frame, and the ratios are the quotients of the runs and CPU reported."""
    out = tmp_path / "motion.json"
    proc = run_tool("tools.bench_motion", "--model-dir", str(models_dir), "--segments", "2", "--still-s", "2",
                    "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["static"]["frames"] == 2 * (50 + 25) and result["demo"]["frames"] == 250
    for clip in ("demo", "static"):
        every, gated = result[clip]["every_frame"], result[clip]["gated"]
        assert every["detector_runs_per_frame"] == 1.0 and 0 < gated["detector_runs_per_frame"] <= 1.0
        assert result[clip]["fewer_runs"] == pytest.approx(1.0 / gated["detector_runs_per_frame"], rel=0.01)
        assert result[clip]["cpu_ratio"] == pytest.approx(every["cpu_ms_per_frame"] / gated["cpu_ms_per_frame"],
                                                          rel=0.01)  # fmt: skip
        assert every["crossings"] > 0 and 0 <= result[clip]["crossing_recall"] <= 1 and 0 <= result[clip]["crossing_recall_moving"] <= 1
    assert result["static"]["gated"]["detector_runs_per_frame"] < 0.8  # the held frames are still
    assert proc.returncode == (0 if result["within_goal"] else 1), proc.stderr[-3000:]


def test_bench_quantize_compares_the_int8_copy_with_fp32_on_the_footage(tmp_path, models_dir):
    """4 calibration frames, 20 frames compared: the copy is made, both models see every frame, and agreement,
    precision and speed-up are the quotients they claim."""
    out = tmp_path / "quantize.json"
    proc = run_tool("tools.bench_quantize", "--model-dir", str(models_dir), "--frames", "20",
                    "--calibration-frames", "4", "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["frames"] == 20 and result["boxes"]["fp32"] > 0
    assert result["agreement"] == pytest.approx(result["matched"] / result["boxes"]["fp32"], abs=1e-4)
    assert result["precision"] == pytest.approx(result["matched"] / max(result["boxes"]["int8"], 1), abs=1e-4)
    cpu = result["cpu_ms_per_frame"]
    assert result["speedup"] == pytest.approx(cpu["fp32"] / cpu["int8"], rel=0.01)
    assert proc.returncode == (0 if result["within_goal"] else 1), proc.stderr[-3000:]


def test_bench_rates_compares_lower_rates_and_a_smaller_input_with_every_frame_at_416(tmp_path, models_dir):
    """40 frames, 2 rates x 2 sizes: the reference is every frame at 416 and agrees with itself, the rate gate
    thins the detector runs as detect_fps says, and the CPU ratios are the quotients of the CPU reported."""
    out = tmp_path / "rates.json"
    proc = run_tool("tools.bench_rates", "--model-dir", str(models_dir), "--frames", "40", "--rates", "12.5",
                    "--sizes", "320", "--json", str(out))  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {(row["detect_fps"], row["input_size"]): row for row in result["settings"]}
    assert result["frames"] == 40 and set(rows) == {(25.0, 416), (12.5, 416), (25.0, 320), (12.5, 320)}
    ref = rows[(25.0, 416)]
    assert ref["crossings"] > 0 and ref["track_recall"] == ref["crossing_recall"] == ref["cpu_ratio"] == 1.0
    for (rate, _), row in rows.items():
        assert row["detector_runs_per_frame"] == (1.0 if rate == 25.0 else 0.5)
        assert row["cpu_ratio"] == pytest.approx(ref["cpu_ms_per_frame"] / row["cpu_ms_per_frame"], rel=0.01)
        assert 0 <= row["track_recall"] <= 1 and 0 <= row["crossing_recall"] <= 1
    assert rows[(12.5, 416)]["cpu_ratio"] > 1.2  # half the detector runs: CPU well under the reference's
    assert proc.returncode == (0 if result["within_goal"] else 1), proc.stderr[-3000:]


def test_bench_face_recall_scores_the_labelled_faces(tmp_path, models_dir):
    """The first 4 labelled frames (3 faces of one man, one frame without a face): each setting's counts are there
    and consistent; CenterFace at its defaults finds those large faces."""
    out = tmp_path / "recall.json"
    proc = run_tool("tools.bench_face_recall", "--model-dir", str(models_dir), "--frames", "4", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    settings = {r["setting"]: r for r in report["settings"]}
    assert report["frames"] == 4 and all(r["faces"] == 3 for r in settings.values())
    assert settings["default"]["found"] == 3 and settings["default"]["recall"] == 1.0
    assert settings["head_rule_only"]["found"] is None and 0 <= settings["head_rule_only"]["covered"] <= 3
    for r in settings.values():
        assert r["covered_share"] == pytest.approx(r["covered"] / 3, abs=0.001)

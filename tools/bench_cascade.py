"""Deployments for ``tools/bench.py``: write one, run it with ``vcascade run``, measure it from outside.

:func:`write_deployment` derives a deployment from configs/demo.yaml (N cameras replaying the same file, ROI
policy, W workers, file or live pacing, free ports, a JSONL sink). :func:`run_cascade` starts ``vcascade run``
on it and samples every process of the run with psutil (CPU time and RSS, every ``SAMPLE_S``); a child process
is named by the metrics port it listens on, which the deployment gives each component. The throughput comes
from the edge's own summary (frames and results over the edge's running time, which starts after its model
is loaded: the launcher starts edges once every worker serves); latencies from the JSONL lines. Each process's
CPU is also taken over the edge's running time alone (``running_cpu_s``: start-up, model loading and the
worker's profiling left out), which is what says which process a run saturates.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml

from vcascade.core.transport.ports import free_port

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
SAMPLE_S = 0.2
"""Period of the psutil samples, s."""


def write_deployment(
    folder: Path, *, cameras: int, policy: str, workers: int = 1, frames: int = 0, live_s: float = 0.0,
    worker_devices: int = 2, url: str | None = None, camera: dict[str, Any] | None = None,
    detector: dict[str, Any] | None = None,
) -> Path:
    """Write ``folder/deploy.yaml``: the demo deployment with ``cameras`` copies of its first camera and its first
    worker's recognizer only (the MobileNetV2 embedder, which the baseline runs too).

    Args:
        folder: where the file, the JSONL sink and the summary go.
        cameras: number of cameras (all replaying the demo's first camera file).
        policy: ROI policy mode (``track`` or ``every_detection``).
        workers: number of center workers (copies of the demo's worker).
        frames: ``max_frames`` per camera (0: the whole file).
        live_s: > 0: cameras paced at the file's frame rate (``realtime: true``, ``loop: true``) for this many
            seconds of stream time, with newest-frame slots (``overflow: drop_oldest``); 0: every frame, as fast
            as the cascade goes (``overflow: block``).
        worker_devices: pipeline stages per worker (CPU devices); 1 runs the recognizer unsplit.
        url: the cameras' source (None: the demo's first camera's file).
        camera: keys set on every camera (e.g. ``motion``; :mod:`tools.bench_variants`).
        detector: keys set on the edge's detector (e.g. ``precision``; a ``path`` replaces the demo's ``model``).

    Returns:
        The file's path.
    """
    data = yaml.safe_load(DEMO.read_text())
    first = next(iter(data["cameras"].values()))
    data["cameras"] = {}
    for i in range(cameras):
        cam = {**first, **(camera or {})}
        if url:
            cam["url"] = url
        if frames:
            cam["max_frames"] = frames
        if live_s:
            cam.update(realtime=True, loop=True, max_frames=int(round(live_s * 25)))
        data["cameras"][f"cam-{i + 1}"] = cam
    for edge in data["edges"].values():
        edge["roi"]["policy"] = {**edge["roi"].get("policy", {}), "mode": policy}
        if detector:
            if "path" in detector:
                edge["detector"].pop("model", None)
            edge["detector"].update(detector)
        edge["sinks"] = [{"type": "jsonl", "path": str(folder / "results.jsonl"), "mode": "truncate"}]
        edge["metrics_port"] = free_port()
        if live_s:
            edge["overflow"] = "drop_oldest"
    for broker in data["brokers"].values():
        broker.update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    template = next(iter(data["workers"].values()))  # the embedder's worker: the baseline runs that recognizer
    recognizer = data["recognizers"][template["recognizer"]]
    points = recognizer["split_points"]
    recognizer["split_points"] = [] if worker_devices == 1 else points if points == "auto" else points[: worker_devices - 1]
    data["recognizers"] = {template["recognizer"]: recognizer}
    for edge in data["edges"].values():
        edge["roi"].pop("routes", None)  # one recognizer: every class goes to it
    data["workers"] = {
        f"worker-{i + 1}": {**template, "devices": ["cpu"] * worker_devices, "metrics_port": free_port()}
        for i in range(workers)
    }
    path = folder / "deploy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_cascade(deploy: Path, model_dir: str | None, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Run ``vcascade run deploy`` to its end and measure it.

    Returns:
        ``frames``, ``detected`` (frames the detector ran on: fewer with motion gating or newest-frame
        skips), ``sent`` (ROIs), ``results``, ``drops``, ``wall_s`` (the edge's running time), ``fps``,
        ``rois_per_s``, ``latency_ms`` (end-to-end of every result), ``first_result_s`` (from the launch to the
        first result line), ``total_s`` (launch to exit, start-up included), ``processes`` (per component:
        ``cpu_s``, ``running_cpu_s`` (over the edge's running time), ``peak_rss_bytes``), ``cpu_s`` (all),
        ``edge`` (the edge's final snapshot).

    Raises:
        RuntimeError: the run exited non-zero (its output is in the message).
    """
    data = yaml.safe_load(deploy.read_text())
    ports = _metrics_ports(data)
    edge_names = {f"edge {name}" for name in data["edges"]}
    summary = deploy.parent / "summary.json"
    cmd = [sys.executable, "-m", "vcascade", "run", str(deploy), "--summary-json", str(summary)]
    if model_dir:
        cmd += ["--model-dir", str(model_dir)]
    launched_unix_ms = time.time() * 1000.0
    proc = subprocess.Popen(cmd, cwd=deploy.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = _Sampler(proc.pid, ports)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        sampler.stop()
    total_s = time.time() - launched_unix_ms / 1000.0
    if proc.returncode != 0:
        raise RuntimeError(f"vcascade run exited with {proc.returncode}:\n{output[-4000:]}")
    out = _measure(json.loads(summary.read_text()), deploy.parent / "results.jsonl", launched_unix_ms, sampler,
                   edge_names)
    out["total_s"] = total_s
    return out


def _measure(summary: dict, jsonl: Path, launched_unix_ms: float, sampler: "_Sampler", edge_names: set[str],
             ) -> dict[str, Any]:  # fmt: skip
    edge = next(p for p in summary["processes"] if p["component"] == "edge")
    cams = edge["cameras"].values()
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
    ok = [line for line in lines if line.get("status") == "ok"]  # camera_state lines have no status
    latency = [line["latency_ms"]["end_to_end"] for line in ok]
    first = min((line["capture_unix_ms"] + line["latency_ms"]["end_to_end"] for line in ok), default=None)
    frames = sum(c["frames"] for c in cams)
    wall_s = edge["elapsed_s"]
    processes = sampler.result(edge_names, wall_s)
    return {
        "frames": frames,
        "detected": sum(c.get("detected", c["frames"]) for c in cams),
        "sent": sum(c["sent"] for c in cams),
        "results": sum(c["results"] for c in cams),
        "drops": sum(sum(c["drops"].values()) for c in cams),
        "wall_s": wall_s,
        "fps": frames / wall_s if wall_s else 0.0,
        "rois_per_s": sum(c["results"] for c in cams) / wall_s if wall_s else 0.0,
        "latency_ms": latency,
        "first_result_s": None if first is None else (first - launched_unix_ms) / 1000.0,
        "processes": processes,
        "cpu_s": sum(p["cpu_s"] for p in processes.values()),
        "edge": edge,
    }


def _metrics_ports(data: dict) -> dict[int, str]:
    ports = {}
    for kind in ("edges", "brokers", "workers"):
        for name, cfg in data[kind].items():
            ports[cfg["metrics_port"]] = f"{kind[:-1]} {name}"
    return ports


class _Sampler:
    """Samples the CPU time and RSS of a process tree every ``SAMPLE_S``; names children by metrics port."""

    def __init__(self, root_pid: int, ports: dict[int, str]) -> None:
        self._root = psutil.Process(root_pid)
        self._ports = ports
        self._names: dict[int, str] = {root_pid: "launcher"}
        self._cpu: dict[int, float] = {}
        self._series: dict[int, list[tuple[float, float]]] = {}  # (monotonic s, cpu s) per sample
        self._rss: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def result(self, edge_names: set[str] = frozenset(), edge_wall_s: float = 0.0) -> dict[str, dict[str, float]]:
        """Per process name: ``cpu_s`` (last sampled user + system), ``running_cpu_s`` (CPU s between the samples
        nearest the edges' running window: the ``edge_wall_s`` before the last sample of an edge named in
        ``edge_names``; absent without one) and ``peak_rss_bytes`` (largest sample)."""
        ends = [self._series[pid][-1][0] for pid, name in self._names.items()
                if name in edge_names and pid in self._series]  # fmt: skip
        window = (max(ends) - edge_wall_s, max(ends)) if ends and edge_wall_s > 0 else None
        out: dict[str, dict[str, float]] = {}
        for pid, cpu in self._cpu.items():
            name = self._names.get(pid, f"pid {pid}")
            out[name] = {"cpu_s": cpu, "peak_rss_bytes": self._rss.get(pid, 0)}
            if window is not None:
                series = self._series[pid]
                out[name]["running_cpu_s"] = _cpu_at(series, window[1]) - _cpu_at(series, window[0])
        return out

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                procs = [self._root, *self._root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in procs:
                self._sample(proc)

    def _sample(self, proc: psutil.Process) -> None:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
            if proc.pid not in self._names:
                self._name(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        self._cpu[proc.pid] = times.user + times.system
        self._series.setdefault(proc.pid, []).append((time.monotonic(), times.user + times.system))
        self._rss[proc.pid] = max(self._rss.get(proc.pid, 0), rss)

    def _name(self, proc: psutil.Process) -> None:
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port in self._ports:
                self._names[proc.pid] = self._ports[conn.laddr.port]
                return


def _cpu_at(series: list[tuple[float, float]], t: float) -> float:
    """CPU s of a process at monotonic time ``t``, from its samples: the last sample at or before ``t`` (0 before
    the first)."""
    before = [cpu for at, cpu in series if at <= t]
    return before[-1] if before else 0.0


def headline(run: dict[str, Any]) -> dict[str, Any]:
    """A run's headline numbers (no per-ROI lists): frames, detector runs per frame, books, frames/s, ROIs/s,
    latency p50/p99 and frame-age p99 (ms, the worst camera's), CPU utilisation per process (its CPU s during the
    edge's running time over that time, ``running_cpu_s``: 1.0 = one core) and the busiest compute process (edge or
    worker)."""
    cams = run["edge"]["cameras"].values()
    ages = [c["frame_age_p99_ms"] for c in cams if c.get("frame_age_p99_ms") is not None]
    utilisation = {name: p.get("running_cpu_s", p["cpu_s"]) / run["wall_s"] for name, p in run["processes"].items()
                   if run["wall_s"]}  # fmt: skip
    compute = {k: v for k, v in utilisation.items() if k.split(" ")[0] in ("edge", "worker")}
    return {
        "frames": run["frames"], "detected": run["detected"], "still": sum(c.get("still", 0) for c in cams),
        "skipped": sum(c.get("skipped", 0) for c in cams),
        "rate_skipped": sum(c.get("rate_skipped", 0) for c in cams),
        "detector_runs_per_frame": run["detected"] / run["frames"] if run["frames"] else 0.0,
        "sent": run["sent"], "results": run["results"], "drops": run["drops"],
        "fps": run["fps"], "rois_per_s": run["rois_per_s"], "p50_ms": percentile(run["latency_ms"], 50),
        "p99_ms": percentile(run["latency_ms"], 99), "frame_age_p99_ms": max(ages, default=0.0),
        "cpu_utilisation": utilisation, "busiest": max(compute, key=compute.get) if compute else None,
    }


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, or None when empty."""
    return float(np.percentile(values, q)) if values else None


def scratch(prefix: str) -> tempfile.TemporaryDirectory:
    """A scratch folder for one run."""
    return tempfile.TemporaryDirectory(prefix=f"vcascade-bench-{prefix}-")

"""``vcascade run FILE``: start every component of a deployment as local processes and watch them.

Brokers start first, then workers, then edges, each in a ``spawn``-ed process (CUDA cannot be re-initialised
in a forked child). Children report snapshots on a queue; the launcher shows a live progress line and, when
every edge has finished (its file cameras ended and its in-flight ROIs drained) or on Ctrl-C, stops the
workers and brokers and prints the summary table. Exit code 0 only when every process exited cleanly and
every ROI is accounted for (sent = results + drops, per camera).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from vcascade.config import Deployment
from vcascade.models import ensure_detector_model
from vcascade.summary import progress_line, summary_tables

log = logging.getLogger(__name__)

WORKER_START_TIMEOUT_S = 300.0
"""How long edges wait for the workers to load their models before starting anyway."""
STOP_TIMEOUT_S = 20.0
"""How long a stopped broker or worker may take to exit before it is terminated."""


def _child(kind: str, config_path: str, name: str, model_dir: str | None, stop: Any, status: Any, log_level: str) -> None:
    """Process entry point of one component (module-level so ``spawn`` can import it)."""
    from vcascade.components import run_component, setup_logging

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher coordinates Ctrl-C
    setup_logging(log_level, f"{kind}:{name}")
    code = 0
    try:
        run_component(kind, config_path, name, stop, status.put, model_dir)
    except Exception as exc:
        logging.getLogger(kind).exception("%s %s failed", kind, name)
        status.put({"component": kind, "name": name, "final": True, "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    exit_now(kind, code, status)


def exit_now(kind: str, code: int, status: Any = None) -> None:
    """End a component process with ``code``; skip interpreter finalisation if a camera read still hangs.

    A camera read the watchdog abandoned may still be blocked inside FFmpeg in a daemon thread
    (:func:`edge.source.capture_threads_alive`); at normal interpreter exit such a thread is unwound through
    OpenCV's C++ frames, which aborts the process ("FATAL: exception not rethrown", exit code -6). Only then
    the process leaves with ``os._exit`` after flushing what it wrote (everything it owns is closed by then);
    otherwise it exits normally.
    """
    if kind != "edge" or not _capture_threads_alive():
        sys.exit(code)
    if status is not None:  # the multiprocessing queue's feeder thread must deliver the final report first
        status.close()
        status.join_thread()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _capture_threads_alive() -> bool:
    from edge.source import capture_threads_alive  # edge processes only: brokers and workers never load cv2

    return capture_threads_alive()


class Launcher:
    """Starts, watches and stops the processes of one deployment on this host."""

    def __init__(self, dep: Deployment, config_path: Path, model_dir: str | None, log_level: str) -> None:
        self.dep, self.config_path, self.model_dir, self.log_level = dep, config_path, model_dir, log_level
        self.ctx = mp.get_context("spawn")
        self.status = self.ctx.Queue()
        self.stop_edges, self.stop_center = self.ctx.Event(), self.ctx.Event()
        self.procs: dict[tuple[str, str], mp.Process] = {}
        self.snapshots: dict[tuple[str, str], dict[str, Any]] = {}

    def start(self) -> None:
        """Spawn brokers and workers, wait until every worker serves (model loaded and split), then the edges.

        Waiting keeps the first ROIs from queueing behind the workers' start-up, which would otherwise show up
        as end-to-end latency.
        """
        self._spawn("broker", self.dep.brokers, self.stop_center)
        self._spawn("stage-group", self.dep.stage_groups, self.stop_center)  # serving before their workers
        group_deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while time.monotonic() < group_deadline and not self.center_failed():
            if all(("stage_group", name) in self.snapshots for name in self.dep.stage_groups):
                break
            self.poll(0.2)
        self._spawn("worker", self.dep.workers, self.stop_center)
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while time.monotonic() < deadline and not self.center_failed():
            if all(("worker", name) in self.snapshots for name in self.dep.workers):
                break
            self.poll(0.2)
        self._spawn("edge", self.dep.edges, self.stop_edges)

    def _spawn(self, kind: str, names: Any, stop: Any) -> None:
        for name in names:
            args = (kind, str(self.config_path), name, self.model_dir, stop, self.status, self.log_level)
            proc = self.ctx.Process(target=_child, args=args, name=f"{kind}:{name}")
            proc.start()
            self.procs[(kind, name)] = proc

    def poll(self, timeout_s: float) -> None:
        """Collect the children's snapshots for up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                snap = self.status.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            self.snapshots[(snap["component"], snap["name"])] = snap

    def edges_done(self) -> bool:
        return all(not p.is_alive() for (kind, _), p in self.procs.items() if kind == "edge")

    def center_failed(self) -> list[str]:
        """Brokers or workers that exited while they should still be serving."""
        return [f"{k} {n}" for (k, n), p in self.procs.items() if k != "edge" and not p.is_alive()]

    def stop(self) -> None:
        """Stop edges (they drain), then workers and brokers; terminate any that overstay."""
        self.stop_edges.set()
        self._join("edge", self.dep.edges[next(iter(self.dep.edges))].drain_timeout_s + STOP_TIMEOUT_S)
        self.stop_center.set()
        self._join("worker", STOP_TIMEOUT_S)
        self._join("stage-group", STOP_TIMEOUT_S)
        self._join("broker", STOP_TIMEOUT_S)
        self.poll(0.5)

    def _join(self, kind: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for (k, name), proc in self.procs.items():
            if k != kind:
                continue
            while proc.is_alive() and time.monotonic() < deadline:
                self.poll(0.1)
                proc.join(timeout=0.1)
            if proc.is_alive():
                log.error("%s %s did not stop within %.0f s; terminating it", kind, name, timeout_s)
                proc.terminate()
                proc.join(timeout=5)

    def exit_codes(self) -> dict[str, int | None]:
        return {f"{k} {n}": p.exitcode for (k, n), p in self.procs.items()}


def run_deployment(
    dep: Deployment,
    config_path: Path,
    model_dir: str | None,
    log_level: str = "WARNING",
    summary_json: Path | None = None,
) -> int:
    """Run a whole deployment locally until its file cameras end or Ctrl-C. Returns the process exit code.

    ``summary_json``: also write the final snapshots of every process and their exit codes there.

    Raises:
        vcascade.models.ModelUnavailable: a detector model is missing and cannot be fetched (checked before any
            process starts, so the user sees one clear message).
    """
    for edge in dep.edges.values():
        ensure_detector_model(edge.detector, model_dir)
    console = Console() if sys.stdout.isatty() else Console(width=120)
    launcher = Launcher(dep, config_path, model_dir, log_level)
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    started = time.monotonic()
    launcher.start()
    failed: list[str] = []
    try:
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            last_plain = 0.0
            while not interrupted and not launcher.edges_done():
                launcher.poll(0.25)
                line = progress_line(launcher.snapshots, time.monotonic() - started)
                live.update(line)
                if not console.is_terminal and time.monotonic() - last_plain >= 5.0:
                    last_plain = time.monotonic()
                    console.print(line, highlight=False)
                failed = launcher.center_failed()
                if failed:
                    break
            live.update("stopping: draining in-flight ROIs ...")
            launcher.stop()
    finally:
        signal.signal(signal.SIGINT, previous)
    for table in summary_tables(launcher.snapshots, time.monotonic() - started):
        console.print(table)
    codes = launcher.exit_codes()
    if summary_json is not None:
        summary_json.parent.mkdir(parents=True, exist_ok=True)
        summary_json.write_text(json.dumps({
            "elapsed_s": time.monotonic() - started, "exit_codes": codes,
            "processes": [snap for _, snap in sorted(launcher.snapshots.items())],
        }, indent=2, default=str))
    return _verdict(console, launcher.snapshots, codes, failed, interrupted)


def _verdict(
    console: Console, snapshots: dict, codes: dict[str, int | None], failed: list[str], interrupted: bool
) -> int:
    """Print why the run is not clean, if it is not; return 0 or 1."""
    problems = [f"{proc} exited with code {code}" for proc, code in codes.items() if code not in (0, None)]
    problems += [f"{proc} stopped while edges were running" for proc in failed]
    for snap in snapshots.values():
        if snap.get("error"):
            problems.append(f"{snap['component']} {snap['name']}: {snap['error']}")
        for cam, c in snap.get("cameras", {}).items():
            if c["sent"] != c["results"] + sum(c["drops"].values()):
                problems.append(f"camera {cam}: sent {c['sent']} != results {c['results']} + drops {c['drops']}")
            if c.get("error"):
                problems.append(f"camera {cam}: {c['error']}")
    if interrupted:
        console.print("[yellow]interrupted (Ctrl-C): in-flight ROIs were drained before exit[/yellow]")
    for problem in problems:
        console.print(f"[red]problem:[/red] {problem}", highlight=False)
    return 1 if problems else 0

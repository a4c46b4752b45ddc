"""``vcascade run FILE``: start every component of a deployment as local processes, supervise and stop them.

Brokers start first, then workers, then edges, each in a ``spawn``-ed process (CUDA cannot be re-initialised
in a forked child). Each child reports snapshots on its own pipe (a child killed mid-write corrupts only its
own pipe, never its siblings' reports). A component that exits unexpectedly (a crash, a signal, a nonzero
exit) is restarted after a backoff; more than ``supervision.max_restarts`` restarts within ``window_s`` stop
it for good (:mod:`vcascade.app.supervise`; a broker or worker stopped that way ends the run). When every edge
has finished (its file cameras ended and its in-flight ROIs drained) or on SIGINT (Ctrl-C) or SIGTERM (docker
stop, systemd, Kubernetes), the launcher stops the edges (they drain), then the workers and brokers, and prints
the summary. Exit code 0 only when the last run of every process exited cleanly, no component was given up,
and every ROI of every edge run that ended on its own is accounted for (sent = results + drops, per camera),
however the run was stopped. An edge run that was killed cannot account for its in-flight ROIs; it is listed,
not checked (docs/RELIABILITY.md, "Stopping").

The children leave SIGINT and SIGTERM to the launcher while it lives, and die with it when it is killed
(:mod:`vcascade.app.parent_death`): no component outlives ``vcascade run``.

``status_path`` (``vcascade run --status-file``): a JSON file rewritten about once a second with each
component's pid, liveness and restarts, for tools such as tools/chaos.py and tools/soak.py.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from vcascade.app.child import child_main
from vcascade.app.component import Component
from vcascade.app.preflight_models import model_problems
from vcascade.app.preflight_ports import check_ports
from vcascade.app.summary import camera_faults, progress_line, restarts_table, starting_line, summary_tables
from vcascade.app.supervise import RestartPolicy
from vcascade.app.ui.server import serve_view
from vcascade.core.config import Deployment
from vcascade.core.runtime.models import ModelUnavailable

log = logging.getLogger(__name__)

WORKER_START_TIMEOUT_S = 300.0
"""How long edges wait for the workers to load their models before starting anyway."""
GRACE_KEY = "supervision.stop_grace_s"
"""The key that sets how long a stopped component may take to exit (an edge: beyond its drain) before it is
killed; named in the log line and the summary's problem line of a kill."""
STATUS_INTERVAL_S = 1.0
"""Seconds between rewrites of the status file."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a run the same way: drain every component, write the summary."""


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` (folders created) through a temporary file, so readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


class Launcher:
    """Starts, supervises (restarts with a storm limit) and stops the processes of one deployment on this host."""

    def __init__(self, dep: Deployment, config_path: Path, model_dir: str | None, log_level: str) -> None:
        self.dep, self.config_path, self.model_dir, self.log_level = dep, config_path, model_dir, log_level
        self.ctx = mp.get_context("spawn")
        self.stop_edges, self.stop_center = self.ctx.Event(), self.ctx.Event()
        sup = dep.supervision
        self.policy = RestartPolicy(
            sup.max_restarts, sup.window_s, sup.backoff_initial_s, max(sup.backoff_max_s, sup.backoff_initial_s)
        )
        self.components: dict[tuple[str, str], Component] = {}
        self.stopped_by: str | None = None
        """The name of the signal that asked the run to stop (``SIGINT``, ``SIGTERM``), None until one does."""

    def request_stop(self, signum: int) -> None:
        """Signal handler of :data:`STOP_SIGNALS`: the run stops (start-up ends early, the main loop stops and
        :meth:`stop` drains). The first signal is remembered; a second one changes nothing."""
        self.stopped_by = self.stopped_by or signal.Signals(signum).name

    @property
    def snapshots(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The latest snapshot of each component (from its current or last run), by ``(kind, name)``."""
        return {key: c.snapshot for key, c in self.components.items() if c.snapshot is not None}

    def start(self) -> None:
        """Spawn brokers, then stage groups, then workers, each kind once the previous one serves (its first
        snapshot: model loaded and split), then the edges. A stop requested meanwhile ends the start-up: the
        kinds not started yet are not started.

        Waiting keeps the first ROIs from queueing behind the workers' start-up, which would otherwise show up
        as end-to-end latency.
        """
        self._add("broker", self.dep.brokers, self.stop_center)
        self._add("stage-group", self.dep.stage_groups, self.stop_center)  # serving before their workers
        self._wait_serving("stage-group", self.dep.stage_groups)
        if self.stopped_by is None:
            self._add("worker", self.dep.workers, self.stop_center)
            self._wait_serving("worker", self.dep.workers)
        if self.stopped_by is None and not self.center_failed():
            self._add("edge", self.dep.edges, self.stop_edges)

    def _wait_serving(self, kind: str, names: Any) -> None:
        """Poll and supervise until every component ``(kind, name)`` has reported that it serves (a report that is
        not final), one was given up or failed its start, a stop is requested, or WORKER_START_TIMEOUT_S."""
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while time.monotonic() < deadline and not self.center_failed() and self.stopped_by is None:
            if all(not self.snapshots.get((kind, name), {"final": True}).get("final") for name in names):
                break  # each has reported, and not its last report (a start that failed reports once, final)
            self.poll(0.2)
            self.supervise()

    def _add(self, kind: str, names: Any, stop: Any) -> None:
        for name in names:
            comp = Component(kind, name, stop, self.policy)
            self.components[(kind, name)] = comp
            self._spawn(comp)

    def _spawn(self, comp: Component) -> None:
        reader, writer = self.ctx.Pipe(duplex=False)
        args = (comp.kind, str(self.config_path), comp.name, self.model_dir, comp.stop, writer, self.log_level,
                os.getpid())  # fmt: skip
        proc = self.ctx.Process(target=child_main, args=args, name=f"{comp.kind}:{comp.name}")
        proc.start()
        writer.close()  # the child holds the write end; EOF on ours means it is gone
        comp.started(proc, reader)

    def poll(self, timeout_s: float) -> None:
        """Collect the children's snapshots for up to ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while (left_s := deadline - time.monotonic()) > 0:
            conns = {c.conn: c for c in self.components.values() if c.conn is not None}
            if not conns:
                time.sleep(left_s)
                return
            for conn in wait(list(conns), timeout=left_s):
                conns[conn].receive()

    def supervise(self) -> None:
        """Record exits, schedule restarts (backoff, storm limit) and start the components whose delay passed."""
        now_s = time.monotonic()
        for comp in self.components.values():
            if comp.exited():
                comp.drain_reports()
                delay_s = comp.on_exit(now_s)
                if delay_s is not None:
                    log.warning("%s %s exited with code %s; restart %d in %.1f s", comp.kind, comp.name,
                                comp.history[-1]["exit_code"], comp.tracker.restarts, delay_s)  # fmt: skip
                elif comp.start_failed:
                    error = (comp.history[-1]["snapshot"] or {}).get("error", "see its log")
                    log.error("%s %s cannot start (%s); not restarting it", comp.kind, comp.name, error)
                elif comp.tracker.gave_up:
                    log.error("%s %s: restart storm (%d restarts within %.0f s); not restarting it", comp.kind,
                              comp.name, self.policy.max_restarts, self.policy.window_s)  # fmt: skip
            if comp.restart_due(now_s):
                self._spawn(comp)

    def edges_done(self) -> bool:
        return all(c.finished for (kind, _), c in self.components.items() if kind == "edge")

    def center_failed(self) -> list[str]:
        """Brokers or workers given up after a restart storm or a start-up error (they should still be serving),
        each as ``KIND NAME stopped after ...``."""
        return [f"{k} {n} stopped after " + ("a start-up error" if c.start_failed else "a restart storm")
                for (k, n), c in self.components.items() if k != "edge" and (c.tracker.gave_up or c.start_failed)]

    def stop(self) -> None:
        """Stop edges (they drain), then workers and brokers; kill any that overstay.

        Edges may take the longest ``drain_timeout_s`` of the deployment plus ``supervision.stop_grace_s``, each
        other kind ``stop_grace_s``; a child still running then is killed (it ignores SIGTERM while the launcher
        lives), logged naming it and the key to raise, and counted (``killed_at_stop``).
        """
        grace_s = self.dep.supervision.stop_grace_s
        self.stop_edges.set()
        self._join("edge", max((e.drain_timeout_s for e in self.dep.edges.values()), default=0.0) + grace_s)
        self.stop_center.set()
        self._join("worker", grace_s)
        self._join("stage-group", grace_s)
        self._join("broker", grace_s)
        self.poll(0.2)
        self.supervise()

    def _join(self, kind: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for (k, name), comp in self.components.items():
            if k != kind or comp.proc is None:
                continue
            while comp.proc.is_alive() and time.monotonic() < deadline:
                self.poll(0.1)
                comp.proc.join(timeout=0.1)
            if comp.proc.is_alive():
                log.error("%s %s (pid %d) did not stop within %.1f s of the stop; killing it (raise %s to give it "
                          "longer)", kind, name, comp.proc.pid, timeout_s, GRACE_KEY)  # fmt: skip
                comp.proc.kill()
                comp.proc.join(timeout=5)
                comp.killed_at_stop += 1
            self.supervise()

    def exit_codes(self) -> dict[str, int | None]:
        """Exit code of the last run of each component (None: still running or never started)."""
        return {f"{k} {n}": c.proc.exitcode if c.proc else None for (k, n), c in self.components.items()}

    def status(self) -> dict[str, Any]:
        """Pid, liveness, restarts and past runs of every component (the status file's content)."""
        return {"launcher_pid": os.getpid(), "unix_s": time.time(),
                "components": [c.status() for c in self.components.values()]}  # fmt: skip


def run_deployment(
    dep: Deployment,
    config_path: Path,
    model_dir: str | None,
    log_level: str = "WARNING",
    summary_json: Path | None = None,
    status_path: Path | None = None,
) -> int:
    """Run a whole deployment locally until its file cameras end, or SIGINT (Ctrl-C) or SIGTERM. Returns the
    process exit code: 0 when the run is clean (see :func:`_verdict`), also after a stop signal, else 1.

    SIGINT and SIGTERM do the same: the edges drain their in-flight ROIs, the workers and brokers stop, the
    summary is printed and written; the handlers are this function's until the summary is written.
    ``summary_json``: also write the final snapshots of every process, their exit codes, restarts and past
    runs there, and ``stopped_by`` (the signal's name, or null). ``status_path``: rewrite
    :meth:`Launcher.status` there about once a second while running.

    Raises:
        vcascade.core.runtime.models.ModelUnavailable: a model is missing and cannot be fetched, or a detector model fails
            its contract check; its message has one line per such model, each naming the key path
            (:func:`vcascade.app.preflight_models.model_problems`, run before any process starts).
        vcascade.app.preflight_ports.PortsTaken: a port of the file cannot be bound on this host (checked first).
    """
    check_ports(dep)
    problems = model_problems(dep, model_dir)
    if problems:
        raise ModelUnavailable("\n".join(problems))
    console = Console() if sys.stdout.isatty() else Console(width=120)
    launcher = Launcher(dep, config_path, model_dir, log_level)
    previous = {sig: signal.signal(sig, lambda signum, frame: launcher.request_stop(signum)) for sig in STOP_SIGNALS}
    view = None  # the live view, when the file asks for it; served once a stop signal is a clean stop
    try:
        if dep.ui.enabled:
            view = serve_view(dep, model_dir=model_dir)
            console.print(f"live view: http://{dep.ui.bind}:{view.server_address[1]}/")
        return _run(launcher, console, summary_json, status_path)
    finally:
        if view is not None:
            view.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(launcher: Launcher, console: Console, summary_json: Path | None, status_path: Path | None) -> int:
    """Start, supervise until the edges are done, a stop signal or a center component given up; stop, summarise."""
    started = time.monotonic()
    console.print(starting_line(launcher.dep), highlight=False)
    launcher.start()
    if launcher.stopped_by is None and not launcher.center_failed():
        console.print(f"center ready after {time.monotonic() - started:.1f} s; edges starting", highlight=False)
    failed: list[str] = []
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        last_plain = last_status = 0.0
        while launcher.stopped_by is None and not launcher.edges_done():
            launcher.poll(0.25)
            launcher.supervise()
            if status_path is not None and time.monotonic() - last_status >= STATUS_INTERVAL_S:
                last_status = time.monotonic()
                write_json_atomic(status_path, launcher.status())
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
    if status_path is not None:
        write_json_atomic(status_path, launcher.status())
    for table in summary_tables(launcher.snapshots, time.monotonic() - started):
        console.print(table)
    restarted = [c.status() for c in launcher.components.values() if c.tracker.restarts or c.tracker.gave_up]
    if restarted:
        console.print(restarts_table(restarted))
    codes = launcher.exit_codes()
    if summary_json is not None:
        write_json_atomic(summary_json, {
            "elapsed_s": time.monotonic() - started, "exit_codes": codes, "stopped_by": launcher.stopped_by,
            "processes": [snap for _, snap in sorted(launcher.snapshots.items())],
            "components": launcher.status()["components"],
            "runs": {f"{k} {n}": c.history for (k, n), c in launcher.components.items()},
        })  # fmt: skip
    return _verdict(console, launcher, codes, failed)


def _verdict(console: Console, launcher: Launcher, codes: dict[str, int | None], failed: list[str]) -> int:
    """Print why the run is not clean, if it is not; return 0 or 1.

    Accounting is checked for every edge run that ended on its own (its final report), including the runs
    before a restart that crashed with an error; a killed run sent no final report and is only listed. A camera
    that failed, ended with an error or never read a frame (:func:`vcascade.app.summary.camera_faults`) is a
    problem.
    """
    problems = [f"{proc} exited with code {code}" for proc, code in codes.items() if code not in (0, None)]
    problems += failed
    problems += [f"{c.kind} {c.name} given up after a restart storm" for c in launcher.components.values()
                 if c.tracker.gave_up and c.kind == "edge"]  # fmt: skip
    problems += [f"{c.kind} {c.name} killed: it did not stop within its grace (raise {GRACE_KEY})"
                 for c in launcher.components.values() if c.killed_at_stop]  # fmt: skip
    for comp in launcher.components.values():
        for run in comp.history:
            snap = run.get("snapshot") or {}
            if not snap.get("final"):
                continue
            if snap.get("error"):
                problems.append(f"{comp.kind} {comp.name} (pid {run['pid']}): {snap['error']}")
            for cam, c in snap.get("cameras", {}).items():
                if c["sent"] != c["results"] + sum(c["drops"].values()):
                    problems.append(f"camera {cam}: sent {c['sent']} != results {c['results']} + drops {c['drops']}")
            problems += camera_faults(snap.get("cameras", {}))
    if launcher.stopped_by is not None:
        console.print(f"[yellow]stopped by {launcher.stopped_by}: in-flight ROIs were drained before exit[/yellow]")
    for problem in problems:
        console.print(f"[red]problem:[/red] {problem}", highlight=False)
    return 1 if problems else 0

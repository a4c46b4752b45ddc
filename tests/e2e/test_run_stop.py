"""End to end: `vcascade run` stops cleanly however it is stopped (docs/RELIABILITY.md, "Stopping").

Real processes: a launcher with one edge (one looping camera paced as live, so the run never ends on its own),
one broker and one worker (the MobileNetV2 embedder), started once the worker has answered. Then

* SIGTERM, what docker stop, systemd and Kubernetes send, to the launcher alone or to its whole process group
  (systemd's default, ``kill -- -PGID``): every component drains, the summary is printed and written, the
  accounting balances, the launcher exits 0 within the drain timeout plus the center's stop;
* SIGKILL to the launcher: every process it started is gone within a bounded time, each one having drained.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.demo import scrape_metrics, short_demo, start_run, write_deployment
from tests.e2e.test_run_demo import _sample
from tests.records import result_lines

pytestmark = pytest.mark.e2e

DRAIN_TIMEOUT_S = 5.0
"""The edge's drain timeout here: what a stop may take beyond the components' own stops."""
STOP_WITHIN_S = DRAIN_TIMEOUT_S + 25.0
"""Bound on a stop: the edge's drain, the worker's (up to 10 s) and broker's (2 s), process exits on a loaded
2-core machine."""
START_TIMEOUT_S = 240.0
"""Until the worker has answered an ROI: torch and the embedder load on a busy machine."""


def _deployment(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = short_demo(tmp_path, free_port, None)  # the embedder and worker-1 only
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(realtime=True, loop=True)
    data["edges"]["edge-1"]["drain_timeout_s"] = DRAIN_TIMEOUT_S
    return write_deployment(tmp_path, data), data


def _start(tmp_path: Path, free_port, models_dir: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """`vcascade run` in its own session, once the worker has answered; returns it and every process it started."""
    config, data = _deployment(tmp_path, free_port)
    proc = start_run(config, models_dir, tmp_path / "summary.json", start_new_session=True)
    worker_port = data["workers"]["worker-1"]["metrics_port"]
    deadline = time.monotonic() + START_TIMEOUT_S
    while _sample(scrape_metrics(worker_port), "vcascade_worker_results_total") == 0:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"no result within {START_TIMEOUT_S} s"
        time.sleep(0.3)
    children = psutil.Process(proc.pid).children(recursive=True)
    names = " ".join(" ".join(child.cmdline()) for child in children)
    assert len(children) >= 3 and "multiprocessing" in names, names  # edge, broker, worker (+ resource tracker)
    return proc, children


def _running(children: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie nobody reaped yet has ended)."""
    alive = []
    for child in children:
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(children: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Poll until every process has ended or ``timeout_s`` passed; the ones still running."""
    deadline = time.monotonic() + timeout_s
    while (alive := _running(children)) and time.monotonic() < deadline:
        psutil.wait_procs(alive, timeout=0.2)
    return alive


def _kill_all(proc: subprocess.Popen, children: list[psutil.Process]) -> None:
    """Leave nothing behind, whatever the test found (before the fix, SIGTERM left orphans)."""
    for p in [*_running(children), *_running([psutil.Process(proc.pid)] if proc.poll() is None else [])]:
        p.kill()
    proc.wait(timeout=30)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["launcher", "process group"])
def test_sigterm_drains_every_component_and_writes_the_summary(tmp_path, free_port, models_dir, target):
    proc, children = _start(tmp_path, free_port, models_dir)
    try:
        sent_s = time.monotonic()
        if target == "launcher":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        output = proc.communicate(timeout=STOP_WITHIN_S + 30)[0]
        took_s = time.monotonic() - sent_s
        leftover = _wait_gone(children, 10.0)  # the resource tracker exits once the launcher's pipe closes
    finally:
        _kill_all(proc, children)
    print(f"vcascade run exited {proc.returncode} {took_s:.1f} s after SIGTERM to the {target}")
    assert proc.returncode == 0, output
    assert took_s < STOP_WITHIN_S, output
    assert not leftover, [" ".join(p.cmdline()) for p in leftover]
    assert "vcascade run summary" in output and "stopped by SIGTERM" in output, output

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "SIGTERM"
    assert summary["exit_codes"] == {"broker broker-1": 0, "worker worker-1": 0, "edge edge-1": 0}
    (edge,) = [p for p in summary["processes"] if p["component"] == "edge"]
    assert edge["final"], "the edge drained and sent its final report"
    tally = edge["cameras"]["street-1"]
    assert tally["sent"] > 0 and tally["results"] > 0
    assert tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally
    lines = result_lines(tmp_path / "results.jsonl")
    assert len([line for line in lines if line["status"] != "tracked"]) == tally["sent"]  # one line per ROI


@pytest.mark.timeout(600)
def test_a_killed_launcher_takes_every_child_with_it(tmp_path, free_port, models_dir):
    proc, children = _start(tmp_path, free_port, models_dir)
    try:
        proc.kill()
        proc.wait(timeout=30)
        killed_s = time.monotonic()
        leftover = _wait_gone(children, STOP_WITHIN_S)
        gone_s = time.monotonic() - killed_s
        names = [" ".join(p.cmdline()) for p in leftover]
    finally:
        _kill_all(proc, children)
    assert not leftover, f"still running {STOP_WITHIN_S} s after the launcher was killed: {names}"
    print(f"every child gone {gone_s:.1f} s after the launcher was killed")
    output = proc.stdout.read()  # EOF: every child, which shared the launcher's stdout, has closed it
    for who in ("edge:edge-1", "broker:broker-1", "worker:worker-1"):  # each drained on the parent-death signal
        said = f"{who} WARNING vcascade.app.parent_death: the launcher (pid {proc.pid}) is gone: stopping and draining"
        assert said in output, output[-4000:]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["kind"] for line in lines)  # whole lines: the edge closed its sink

"""Measure the walk of an ROI through the code: which vcascade modules run while a deployment serves ROIs.

docs/DESIGN.md's "Following one ROI in the code" lists the files one ROI crosses; this tool measures them
instead of counting names. It runs a deployment (configs/demo.yaml by default, on free ports, its outputs in a
temporary folder) with ``vcascade run``, whose launcher starts every component in its own process. Each of those
processes runs under a profiler (``sys.setprofile`` and ``threading.setprofile``: every Python function call of
every thread) that starts recording at the first ROI the process handles (the first ``wire.Roi`` it encodes or
decodes), so start-up (config, model loading, export, profiling, binding) is left out. Once every recognizer
named by the edges' routes has answered ``--answers`` ROIs (result lines with ``status: ok`` in the JSONL sink),
the profilers stop recording and the run is stopped.

A module is on the walk when one of its functions ran in that window, in any thread of any component process:
per frame (capture, detection, tracking), per ROI (selection, link, broker, worker, head), per answer (the way
back, history, sinks), and on a timer beside them (heartbeats, liveness, metric refreshes). Left out: the
launcher's side of a child (``vcascade.app``: the report pipe to the launcher). The walk of one recognizer's ROIs
is the edges' and brokers' modules and those of the workers running that recognizer.

Run from the repository root::

    python -m tools.roi_walk --model-dir DIR [--answers 20] [--json walk.json]

It prints the modules per component (edge, broker, center, core) with the processes that ran them, and the
count of files per recognizer and for every ROI. tests/tools/test_roi_walk.py runs the short form
(``--answers 2``) and checks that the walk stays within the count docs/DESIGN.md gives.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

import vcascade.app.launcher
from vcascade.app.child import child_main
from vcascade.app.cli import main as vcascade_main
from vcascade.core.protocol import wire
from vcascade.core.protocol.bounded_decode import decode_versioned
from vcascade.core.state_dir import STATE_DIR_ENV
from vcascade.core.transport.ports import free_port

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
FLUSH_S = 0.2
"""How often a traced process writes what it recorded, and looks for the stop file, s."""
STOP_FILE = "stop-recording"
"""Created in the trace folder when enough ROIs were answered: the processes stop recording."""
TRACE_DIR_ENV = "VCASCADE_ROI_WALK_DIR"
"""Set by the tool for its launcher's children: the folder their recorders write to."""


class Recorder:
    """The profiler of one component process: counts calls per (function, thread) from the first ROI on.

    Recording starts at the first call of :func:`vcascade.core.protocol.wire.encode` with a ``wire.Roi`` (the
    edge sending one) or the first return of :func:`vcascade.core.protocol.bounded_decode.decode_versioned`
    giving one (a broker or worker receiving one: ``wire.decode`` and ``wire.split_message`` both decode through
    it), and stops when ``STOP_FILE`` appears in ``folder``. Every ``FLUSH_S`` the counts are
    written to ``folder/<kind>-<name>.json`` (a process may end with ``os._exit``: nothing waits for exit).
    """

    def __init__(self, folder: Path, kind: str, name: str) -> None:
        self.folder, self.kind, self.name = folder, kind, name
        self.recording = self.stopped = False
        self.calls: dict[tuple[Any, int], int] = {}
        self._encode, self._decode = wire.encode.__code__, decode_versioned.__code__

    def install(self) -> None:
        """Start the flush thread, then profile this thread and every thread started from now on."""
        threading.Thread(target=self._flush_loop, name="roi-walk-flush", daemon=True).start()
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.stopped:
            return
        if event == "call":
            code = frame.f_code
            if self.recording:
                key = (code, threading.get_ident())
                self.calls[key] = self.calls.get(key, 0) + 1
            elif code is self._encode and isinstance(frame.f_locals.get("header"), wire.Roi):
                self.recording = True
        elif event == "return" and not self.recording and frame.f_code is self._decode and isinstance(arg, wire.Roi):
            self.recording = True

    def _flush_loop(self) -> None:
        while not self.stopped:
            self.stopped = (self.folder / STOP_FILE).exists()
            self._write()
            time.sleep(FLUSH_S)

    def _write(self) -> None:
        files = {os.path.realpath(m.__file__): name for name, m in list(sys.modules.items())
                 if name.startswith("vcascade") and getattr(m, "__file__", None)}  # fmt: skip
        threads = {t.ident: t.name for t in threading.enumerate()}
        functions = []
        for (code, ident), calls in self.calls.copy().items():
            module = files.get(os.path.realpath(code.co_filename))
            if module is not None:
                functions.append({"module": module, "function": code.co_qualname, "line": code.co_firstlineno,
                                  "thread": threads.get(ident, str(ident)), "calls": calls})  # fmt: skip
        record = {"kind": self.kind, "name": self.name, "recording": self.recording, "stopped": self.stopped,
                  "functions": functions}  # fmt: skip
        path = self.folder / f"{self.kind}-{self.name}.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)


def traced_child(kind: str, config_path: str, name: str, *rest: Any) -> None:
    """The launcher's child entry point during a walk: :func:`vcascade.app.child.child_main` under a
    :class:`Recorder` writing to ``$VCASCADE_ROI_WALK_DIR``."""
    Recorder(Path(os.environ[TRACE_DIR_ENV]), kind, name).install()
    child_main(kind, config_path, name, *rest)


def write_deployment(config: Path, folder: Path) -> tuple[Path, Path, set[str]]:
    """Write ``folder/deploy.yaml``: ``config`` with free ports and its edges' sinks in ``folder``.

    Returns:
        The file, the JSONL results file every edge writes to, and the recognizers the edges route to.
    """
    data = yaml.safe_load(config.read_text())
    results = folder / "results.jsonl"
    for section in ("edges", "brokers", "workers", "stage_groups"):
        for component in (data.get(section) or {}).values():
            for key in [k for k in component if k.endswith("_port")]:
                component[key] = free_port()
    recognizers = set()
    for edge in data["edges"].values():
        sinks = [s for s in edge.get("sinks", []) if s["type"] not in ("jsonl", "zmq_pub")]
        edge["sinks"] = [*sinks, {"type": "jsonl", "path": str(results), "mode": "append"},
                         {"type": "zmq_pub", "endpoint": f"tcp://127.0.0.1:{free_port()}"}]  # fmt: skip
        workers = [{"recognizer": w["recognizer"]} for w in data["workers"].values()]
        routes = edge.get("roi", {}).get("routes") or workers
        recognizers |= {route["recognizer"] for route in routes}
    path = folder / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, results, recognizers


def answered(results: Path) -> dict[str, int]:
    """Answered ROIs (result lines with ``status: ok``) per recognizer in the JSONL file ``results``."""
    counts: dict[str, int] = defaultdict(int)
    if results.exists():
        for text in results.read_text().splitlines():
            line = json.loads(text) if text.endswith("}") else {}
            if line.get("kind") == "result" and line.get("status") == "ok":
                counts[line.get("recognizer") or ""] += 1
    return counts


def stop_when_answered(results: Path, traces: Path, recognizers: set[str], answers: int, timeout_s: float,
                       outcome: dict[str, Any]) -> None:  # fmt: skip
    """Wait until every recognizer answered ``answers`` ROIs (or ``timeout_s``), stop the recorders, wait for
    their last writes, then stop the run (SIGINT to this process, whose launcher drains and exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        outcome["answered"] = dict(answered(results))
        if all(outcome["answered"].get(r, 0) >= answers for r in recognizers):
            break
        time.sleep(FLUSH_S)
    else:
        outcome["timed_out"] = True
    (traces / STOP_FILE).touch()
    deadline = time.monotonic() + 30 * FLUSH_S
    while time.monotonic() < deadline and not all(json.loads(p.read_text())["stopped"] for p in traces.glob("*.json")):
        time.sleep(FLUSH_S)
    os.kill(os.getpid(), signal.SIGINT)


def run_walk(config: Path, model_dir: str | None, answers: int, timeout_s: float) -> dict[str, Any]:
    """Run ``config`` under the recorders until every routed recognizer answered ``answers`` ROIs.

    Returns:
        ``{"processes": [recorder output per process], "answered": {recognizer: n}, "exit_code": n,
        "timed_out": bool}``.
    """
    with tempfile.TemporaryDirectory(prefix="roi-walk-") as tmp:
        folder = Path(tmp)
        deploy, results, recognizers = write_deployment(config, folder)
        traces = folder / "traces"
        traces.mkdir()
        os.environ[TRACE_DIR_ENV] = str(traces)
        os.environ[STATE_DIR_ENV] = str(folder / "state")
        vcascade.app.launcher.child_main = traced_child  # the launcher's children run under a recorder
        outcome: dict[str, Any] = {"timed_out": False, "answered": {}}
        watcher = threading.Thread(target=stop_when_answered, daemon=True,
                                   args=(results, traces, recognizers, answers, timeout_s, outcome))  # fmt: skip
        watcher.start()
        argv = ["run", str(deploy), *(["--model-dir", model_dir] if model_dir else [])]
        outcome["exit_code"] = vcascade_main(argv)
        outcome["answered"] = dict(answered(results))
        outcome["processes"] = [json.loads(p.read_text()) for p in sorted(traces.glob("*.json"))]
    return outcome


LEFT_OUT_LAYERS = ("vcascade.app.",)
"""Modules not counted: the launcher's side of a child (its report pipe), which runs in every process on a timer
and never touches an ROI."""


def walk_modules(outcome: dict[str, Any], workers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The modules that ran while ROIs were served, per recognizer.

    Args:
        outcome: :func:`run_walk`'s result.
        workers: worker name -> the recognizer it runs.

    Returns:
        ``{recognizer: {"modules": {module: [process, ...]}, "per_component": {component: n}, "files": n}}``,
        with the edges' and brokers' processes counted for every recognizer and a worker's for its own, and
        ``"all"`` for every process.
    """
    ran: dict[str, set[str]] = {}
    for process in outcome["processes"]:
        modules = {f["module"] for f in process["functions"] if not f["module"].startswith(LEFT_OUT_LAYERS)}
        ran[f"{process['kind']} {process['name']}"] = modules
    walks = {}
    for recognizer in [*sorted(set(workers.values())), "all"]:
        modules: dict[str, list[str]] = defaultdict(list)
        for process, names in ran.items():
            kind, name = process.split(" ", 1)
            if kind != "worker" or recognizer in ("all", workers.get(name)):
                for module in names:
                    modules[module].append(process)
        per_component: dict[str, int] = defaultdict(int)
        for module in modules:
            per_component[module.split(".")[1]] += 1
        walks[recognizer] = {"modules": dict(sorted(modules.items())), "per_component": dict(per_component),
                             "files": len(modules)}  # fmt: skip
    return walks


def print_walks(walks: dict[str, dict[str, Any]], answered: dict[str, int]) -> None:
    """The modules of the walk over every process, by component, then the count per recognizer."""
    every = walks["all"]["modules"]
    for component in ("edge", "broker", "center", "core"):
        names = [m for m in every if m.split(".")[1] == component]
        print(f"{component} ({len(names)}):")
        for module in names:
            print(f"  {module:48s} {', '.join(every[module])}")
    for recognizer, walk in walks.items():
        counts = ", ".join(f"{c} {n}" for c, n in sorted(walk["per_component"].items()))
        roi = "every ROI" if recognizer == "all" else f"{recognizer}'s ROIs ({answered.get(recognizer, 0)} answered)"
        print(f"walk of {roi}: {walk['files']} files ({counts})")


def main(argv: list[str] | None = None) -> int:
    """Command line: run the walk, print it, write it as JSON with ``--json``; exit code 1 when the answers did not
    come within ``--timeout-s`` or the run did not end cleanly."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEMO, help="deployment file (default configs/demo.yaml)")
    parser.add_argument("--model-dir", help="folder holding the deployment's models")
    parser.add_argument("--answers", type=int, default=20, help="answered ROIs per recognizer before stopping")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="give up waiting for the answers after this")
    parser.add_argument("--json", type=Path, help="write the walks (and the calls recorded per process) here")
    args = parser.parse_args(argv)
    workers = {name: w["recognizer"] for name, w in yaml.safe_load(args.config.read_text())["workers"].items()}
    outcome = run_walk(args.config, args.model_dir, args.answers, args.timeout_s)
    walks = walk_modules(outcome, workers)
    print_walks(walks, outcome["answered"])
    if args.json:
        args.json.write_text(json.dumps({**outcome, "walks": walks}, indent=1))
    if outcome["timed_out"] or outcome["exit_code"] != 0:
        print(f"roi_walk: answers {outcome['answered']} (wanted {args.answers} per recognizer), run exit code "
              f"{outcome['exit_code']}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

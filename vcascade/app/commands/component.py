"""``vcascade edge|broker|worker|stage-group --config FILE --name NAME``: one component of the file in this
process (multi-host deployments), until SIGINT/SIGTERM (edges: until their cameras end); prints its final
snapshot as JSON."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from vcascade.app.commands import EXIT_FAILURE, EXIT_NO_RESTART, EXIT_OK
from vcascade.app.commands.options import add_log_format, add_model_dir
from vcascade.app.components import COMPONENT_KINDS, run_component
from vcascade.app.process_exit import exit_now
from vcascade.core.config import load_config
from vcascade.core.telemetry.logs import configure_logging
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.transport.security import SecurityError
from vcascade.core.runtime.startup import StartupError


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``--config``, ``--name``, the log level and format; ``--model-dir`` for the kinds that load models."""
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--log-level", default="INFO")
    add_log_format(parser)
    if COMPONENT_KINDS[command].takes_model_dir:
        add_model_dir(parser)
    parser.set_defaults(kind=command)


def handle(args: argparse.Namespace) -> int:
    """Run the component; EXIT_NO_RESTART (a :class:`vcascade.core.runtime.startup.StartupError`: a missing or unfit model)
    or EXIT_FAILURE with one line (no traceback) when it cannot start."""
    load_config(args.config)  # config errors exit 2 before anything starts
    configure_logging(args.log_level, args.kind, args.name, args.log_format)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    final: dict = {}

    def report(snapshot: dict) -> None:
        if snapshot.get("final"):
            final.update(snapshot)

    try:
        run_component(args.kind, str(args.config), args.name, stop, report, getattr(args, "model_dir", None))
    except StartupError as exc:  # a missing or unfit model: a supervisor should not restart it (systemd:
        print(f"vcascade: {args.kind} {args.name}: {exc}", file=sys.stderr)  # RestartPreventExitStatus=2 3)
        return EXIT_NO_RESTART
    except (ModelUnavailable, KeyError, SecurityError, FileNotFoundError, ValueError) as exc:
        # a missing model file or a split point the model does not have: one line, no traceback
        print(f"vcascade: {args.kind} {args.name}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(final, indent=2, default=str))
    exit_now(args.kind, EXIT_OK)  # normal exit unless a camera read still hangs: see its docstring
    return EXIT_OK

"""``vcascade run FILE``: run every component of the file as local processes, print the summary
(:mod:`vcascade.app.launcher`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vcascade.app.commands import EXIT_FAILURE
from vcascade.app.commands.options import add_log_format, add_model_dir
from vcascade.app.launcher import run_deployment
from vcascade.app.preflight_ports import PortsTaken
from vcascade.core.config import load_config
from vcascade.core.telemetry.logs import FORMAT_ENV, configure_logging
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.core.telemetry.http import HttpPortInUse


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, the model folder, the children's log level and format, the summary and status files."""
    parser.add_argument("file", type=Path)
    add_model_dir(parser)
    parser.add_argument("--log-level", default="WARNING", help="log level of the child processes (default WARNING)")
    parser.add_argument("--summary-json", type=Path, help="also write the run summary (per process, per camera) here")
    add_log_format(parser)
    parser.add_argument("--status-file", type=Path,
                        help="rewrite each process's pid and restarts here every second (JSON)")  # fmt: skip


def handle(args: argparse.Namespace) -> int:
    """Run the deployment; the launcher's exit code, or EXIT_FAILURE when a port of the file is taken (before
    anything starts, one line per port naming its key and holder), a model is unavailable or the live view's
    port is taken."""
    dep = load_config(args.file)
    os.environ[FORMAT_ENV] = args.log_format  # the launcher's children inherit it
    configure_logging("WARNING", "vcascade")
    try:
        return run_deployment(dep, args.file, args.model_dir, args.log_level, args.summary_json, args.status_file)
    except (PortsTaken, ModelUnavailable, HttpPortInUse) as exc:  # one line per port taken or model missing
        for line in str(exc).splitlines():
            print(f"vcascade: {line}", file=sys.stderr)
        return EXIT_FAILURE

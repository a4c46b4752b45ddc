"""``vcascade ui FILE [--bind ADDR] [--port N] [--model-dir DIR]``: serve the live view of a deployment
(:mod:`vcascade.app.ui`).

It runs until Ctrl-C or SIGTERM, whether or not ``ui.enabled`` is set (that only makes ``vcascade run`` start
it). ``--bind`` and ``--port`` override ``ui.bind`` and ``ui.port``; a non-loopback address needs ``ui.token``.
``--model-dir`` is the folder of the embedding recognizer's model that like-queries load, as for the other
commands that load models.
Exit codes: 0 stopped, 1 the port cannot be bound, 2 invalid configuration/usage.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.app.commands.options import add_model_dir
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
from vcascade.core.telemetry.logs import configure_logging
from vcascade.core.telemetry.http import HttpPortInUse
from vcascade.core.schema.ui import is_loopback


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, the address overrides and the model folder."""
    parser.add_argument("file", type=Path)
    parser.add_argument("--bind", help="address to bind (default: ui.bind, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: ui.port, 8090)")
    add_model_dir(parser)


def handle(args: argparse.Namespace) -> int:
    """Serve the view until SIGINT or SIGTERM."""
    dep = load_config(args.file)
    bind = args.bind or dep.ui.bind
    if not is_loopback(bind) and dep.ui.token is None:
        print(f"vcascade: --bind {bind}: a non-loopback address needs ui.token (token: ${{VAR}})", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging("INFO", "vcascade")
    stopped = threading.Event()  # handlers first: a SIGTERM as soon as the view answers is a clean stop
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stopped.set())
    try:
        server = serve_view(dep, bind, args.port, args.model_dir)
    except HttpPortInUse as exc:
        print(f"vcascade: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"live view of {args.file}: http://{bind}:{server.server_address[1]}/", flush=True)
    stopped.wait()
    server.shutdown()
    return EXIT_OK

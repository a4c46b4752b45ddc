"""``vcascade status FILE [--once] [--interval S]``: live view of a deployment read from its components'
metrics endpoints (:mod:`vcascade.app.status`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vcascade.app.status import run_status


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, ``--once`` and the scrape interval."""
    parser.add_argument("file", type=Path)
    parser.add_argument("--once", action="store_true", help="print one snapshot (rates over --interval) and exit")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes (default 1)")


def handle(args: argparse.Namespace) -> int:
    """Show the view until Ctrl-C (or one snapshot with ``--once``)."""
    return run_status(args.file, args.once, args.interval)

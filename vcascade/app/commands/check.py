"""``vcascade check FILE``: validate a deployment file and count what it declares."""

from __future__ import annotations

import argparse
from pathlib import Path

from vcascade.app.commands import EXIT_OK
from vcascade.core.config import load_config


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The deployment file."""
    parser.add_argument("file", type=Path, help="deployment YAML file")


def handle(args: argparse.Namespace) -> int:
    """Print ``FILE: OK (2 cameras, 1 edge, ...)``. Raises ConfigError (exit 2) for an invalid file."""
    dep = load_config(args.file)
    sections = {"camera": dep.cameras, "edge": dep.edges, "broker": dep.brokers, "worker": dep.workers,
                "recognizer": dep.recognizers}  # fmt: skip
    print(f"{args.file}: OK ({', '.join(plural(len(entries), noun) for noun, entries in sections.items())})")
    return EXIT_OK


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an ``s`` unless ``count`` is 1: ``1 edge``, ``0 edges``, ``2 edges``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

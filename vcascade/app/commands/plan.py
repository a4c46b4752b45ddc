"""``vcascade plan FILE [--worker NAME] [--batch N] [--model-dir DIR]``: profile each worker's recognizer and show
its stage split and balance (:mod:`vcascade.app.plan`).

Exit codes: 0 printed, 1 a model could not be loaded, 2 bad configuration or a split point the model lacks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.app.commands.options import add_model_dir
from vcascade.app.plan import plan_worker, render
from vcascade.core.config import load_config


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, ``--worker``, ``--batch`` and the model folder."""
    parser.add_argument("file", type=Path)
    parser.add_argument("--worker", help="only this worker (default: all)")
    parser.add_argument("--batch", type=int, help="micro-batch size profiled (default: the worker's max_batch)")
    add_model_dir(parser)


def handle(args: argparse.Namespace) -> int:
    """Print each worker's plan; ConfigError propagates to the CLI (exit 2)."""
    dep = load_config(args.file)
    if args.worker is not None and args.worker not in dep.workers:
        print(f"vcascade plan: no worker {args.worker!r} in {args.file} (have: {', '.join(sorted(dep.workers))})",
              file=sys.stderr)  # fmt: skip
        return EXIT_CONFIG
    if args.batch is not None and args.batch < 1:
        print(f"vcascade plan: --batch must be >= 1, got {args.batch}", file=sys.stderr)
        return EXIT_CONFIG
    console = Console()
    for worker in [args.worker] if args.worker else list(dep.workers):
        recognizer = dep.workers[worker].recognizer
        try:
            wp = plan_worker(dep, worker, args.batch, args.model_dir)
        except ValueError as exc:
            print(f"vcascade plan: {args.file}: recognizers.{recognizer}.split_points: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except (OSError, RuntimeError, ImportError) as exc:
            print(f"vcascade plan: worker {worker}: cannot load recognizer {recognizer!r}: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        render(console, wp)
    return EXIT_OK

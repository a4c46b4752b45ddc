"""``vcascade check FILE [--deep]``: validate a deployment file and count what it declares; with ``--deep`` also run
the pre-flight checks of :mod:`vcascade.app.preflight` on this host (models, split points, cameras, key files,
ports) and print one line per problem.

The pre-flight module loads ONNX Runtime, OpenCV and torch, so it is named by its module path and imported only
for ``--deep`` (like the components of :mod:`vcascade.app.components`): a plain ``vcascade check`` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from vcascade.app.commands import EXIT_CONFIG, EXIT_OK
from vcascade.app.privacy_models import privacy_model_problems
from vcascade.core.config import load_config
from vcascade.core.runtime.models import MODEL_DIR_ENV
from vcascade.core.schema.checks import privacy_notices

PREFLIGHT = "vcascade.app.preflight:deep_problems"
"""``module:function`` of the deep checks: ``(deployment, model_dir, camera_timeout_s) -> list[str]``."""
CAMERA_TIMEOUT_S = 10.0
"""Default of ``--camera-timeout-s``: each camera's time to open and decode its first frame, s."""


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The deployment file; ``--deep`` with its model folder and camera timeout."""
    parser.add_argument("file", type=Path, help="deployment YAML file")
    parser.add_argument("--deep", action="store_true",
                        help="also open every camera, load every model and run its contract check, load the key "
                             "files and check that the file's ports are free on this host")  # fmt: skip
    parser.add_argument("--model-dir", default=os.environ.get(MODEL_DIR_ENV),
                        help=f"the folder `vcascade run --model-dir` would get (default ${MODEL_DIR_ENV})")
    parser.add_argument("--camera-timeout-s", type=float, default=CAMERA_TIMEOUT_S,
                        help=f"with --deep: time each camera may take to open and decode its first frame "
                             f"(default {CAMERA_TIMEOUT_S:.0f})")  # fmt: skip


def handle(args: argparse.Namespace) -> int:
    """Print ``FILE: OK (2 cameras, 1 edge, ...)``, preceded by one ``privacy:`` line per exit that leaves faces
    unredacted on purpose; a face or text model file that is missing, and with ``--deep`` every pre-flight problem,
    is one line on stderr and EXIT_CONFIG. Raises ConfigError (exit 2) for an invalid file."""
    dep = load_config(args.file)
    missing = privacy_model_problems(dep, args.model_dir)
    for problem in missing:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if missing:
        return EXIT_CONFIG
    if args.deep:
        module, function = PREFLIGHT.split(":")
        problems = getattr(importlib.import_module(module), function)(dep, args.model_dir, args.camera_timeout_s)
        for problem in problems:
            print(f"{args.file}: {problem}", file=sys.stderr)
        if problems:
            return EXIT_CONFIG
    sections = {"camera": dep.cameras, "edge": dep.edges, "broker": dep.brokers, "worker": dep.workers,
                "recognizer": dep.recognizers}  # fmt: skip
    deep = ("; cameras, models, key files and ports checked" if args.deep
            else "; the file only (--deep also opens the cameras, loads the models, checks key files and ports)")
    for notice in privacy_notices(dep):
        print(f"{args.file}: privacy: {notice}")
    print(f"{args.file}: OK ({', '.join(plural(len(entries), noun) for noun, entries in sections.items())}){deep}")
    return EXIT_OK


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an ``s`` unless ``count`` is 1: ``1 edge``, ``0 edges``, ``2 edges``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

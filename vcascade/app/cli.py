"""The ``vcascade`` command: parse, run one command, return its exit code.

    vcascade check FILE [--deep]                          validate a deployment file (--deep: also its cameras,
                                                          models, key files and ports on this host)
    vcascade run FILE [--model-dir DIR]                   run every component locally, print the summary
    vcascade edge|broker|worker --config FILE --name NAME one component (multi-host deployments)
    vcascade stage-group --config FILE --name NAME        stages of a worker's recognizer in their own process
    vcascade keys generate DIR [--config FILE] [--name NAME ...] [--force]
                                                          CurveZMQ keypairs, one per component
    vcascade keys check --config FILE [--name NAME ...]   load the key files each component needs
    vcascade prometheus-config FILE [--scrape-interval S] [--rule-file F ...] [-o OUT]
                                                          Prometheus scrape config, one job per component kind
    vcascade status FILE [--once] [--interval S]          live view of every component's metrics endpoint
    vcascade camera add|remove|list --config FILE --edge NAME ...
                                                          cameras of a running edge
    vcascade plan FILE [--worker NAME] [--batch N] [--model-dir DIR]
                                                          profile recognizers, show their stage split
    vcascade quantize --model FILE --calibration VIDEO [--frames N] [--out FILE]
                                                          int8 copy of a YOLOX detector
    vcascade --version

Each command is a module of :mod:`vcascade.app.commands` named in :data:`COMMANDS`. Only the module of the
command being run is imported (``vcascade check`` loads no torch, OpenCV or ONNX Runtime); ``vcascade --help``
lists the commands from the table alone.

Exit codes: 0 success, 1 run-time failure (a process failed, an ROI unaccounted, a camera failed, a model
unavailable), 2 invalid configuration or usage, or ``check --deep`` problems (one message per problem, no
traceback), 3 a component's deterministic start-up error (``vcascade edge|worker|...``: do not restart it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import NamedTuple

from vcascade import __version__
from vcascade.app.commands import EXIT_CONFIG
from vcascade.app.components import COMPONENT_KINDS
from vcascade.core.config import ConfigError

COMMANDS_PACKAGE = "vcascade.app.commands"


class Command(NamedTuple):
    """One row of the command table."""

    module: str
    """The command's module in :mod:`vcascade.app.commands` (its ``add_arguments`` and ``handle``)."""
    help: str
    """The line ``vcascade --help`` shows for it."""


COMMANDS: dict[str, Command] = {
    "check": Command("check", "validate a deployment file"),
    "run": Command("run", "run every component of the file as local processes"),
    **{kind: Command("component", f"run one {kind} of the file in this process") for kind in COMPONENT_KINDS},
    "keys": Command("keys", "CurveZMQ key files (docs/SECURITY.md)"),
    "prometheus-config": Command("prometheus_config", "print a Prometheus scrape config for every component of FILE"),
    "status": Command("status", "live view of a deployment read from its components' metrics endpoints"),
    "ui": Command("ui", "serve the live view in the browser: every camera's annotated frames, states, numbers"),
    "camera": Command("camera", "add, remove or list the cameras of a running edge"),
    "plan": Command("plan", "profile each worker's recognizer and show its stage split and balance"),
    "quantize": Command("quantize", "write the int8 copy of a YOLOX detector, calibrated on a clip (docs/DETECTORS.md)"),
}
"""Every command by the name it is typed with, in the order ``vcascade --help`` lists them."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: parse ``argv`` (default ``sys.argv[1:]``), run the command, return
    its exit code. A usage error, ``--help`` or ``--version`` exits through argparse (``SystemExit``, code 2 or 0);
    an invalid deployment file prints its problems and returns ``EXIT_CONFIG``."""
    argv = sys.argv[1:] if argv is None else argv
    parser, command = _parser(_command_name(argv))
    args = parser.parse_args(argv)
    try:
        return command.handle(args)
    except ConfigError as exc:
        print(f"vcascade: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG


def _command_name(argv: list[str]) -> str | None:
    """The first word that is not an option: the top-level options (``--help``, ``--version``) take no value."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _parser(name: str | None) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    """The parser listing every command of :data:`COMMANDS`, with the arguments of command ``name`` only (its
    module imported here); that module, or None when ``name`` is not a command (argparse then reports it)."""
    parser = argparse.ArgumentParser(prog="vcascade", description="Live video analytics cascade across many cameras.")
    parser.add_argument("--version", action="version", version=f"vcascade {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    module = None
    for command_name, command in COMMANDS.items():
        command_parser = sub.add_parser(command_name, help=command.help, description=command.help)
        if command_name == name:
            module = importlib.import_module(f"{COMMANDS_PACKAGE}.{command.module}")
            module.add_arguments(command_parser, command_name)
    return parser, module


if __name__ == "__main__":
    sys.exit(main())

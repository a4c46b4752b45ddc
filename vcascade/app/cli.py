"""The ``vcascade`` command.

    vcascade check FILE                                   validate a deployment file
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
                                                          cameras of a running edge (vcascade/app/control_cli.py)
    vcascade plan FILE [--worker NAME] [--batch N] [--model-dir DIR]
                                                          profile recognizers, show their stage split

Exit codes: 0 success, 1 run-time failure (a process failed, an ROI unaccounted, a model unavailable),
2 invalid configuration or usage (one message per problem, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from vcascade.app.components import COMPONENT_KINDS, run_component
from vcascade.app.control_cli import add_camera_parser
from vcascade.core.config import ConfigError, Deployment, load_config
from vcascade.core.logs import FORMAT_ENV, LOG_FORMATS, configure_logging

EXIT_FAILURE, EXIT_CONFIG = 1, 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script. Returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"vcascade: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcascade", description="Live video analytics cascade across many cameras.")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="validate a deployment file")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=_check)

    run = sub.add_parser("run", help="run every component of the file as local processes")
    run.add_argument("file", type=Path)
    _model_dir_option(run)
    run.add_argument("--log-level", default="WARNING", help="log level of the child processes (default WARNING)")
    run.add_argument("--summary-json", type=Path, help="also write the run summary (per process, per camera) here")
    _log_format_option(run)
    run.add_argument("--status-file", type=Path, help="rewrite each process's pid and restarts here every second (JSON)")
    run.set_defaults(handler=_run)

    for kind in COMPONENT_KINDS:
        one = sub.add_parser(kind, help=f"run one {kind} of the file in this process")
        one.add_argument("--config", type=Path, required=True)
        one.add_argument("--name", required=True)
        one.add_argument("--log-level", default="INFO")
        _log_format_option(one)
        if kind in ("edge", "worker"):
            _model_dir_option(one)
        one.set_defaults(handler=_one, kind=kind)
    _keys_parser(sub)
    from vcascade.app import promconfig, status
    from vcascade.app.plan import add_plan_parser

    promconfig.add_parser(sub)
    status.add_parser(sub)
    add_camera_parser(sub)
    add_plan_parser(sub)
    return parser


def _keys_parser(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="CurveZMQ key files (README, section Security)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    gen = keys_sub.add_parser("generate", help="write NAME.key and NAME.key_secret (mode 0600) per component")
    gen.add_argument("dir", type=Path, help="output folder (created, mode 0700)")
    gen.add_argument("--config", type=Path, help="one keypair per broker, edge and worker of this file")
    gen.add_argument("--name", action="append", default=[], help="a component name (repeatable)")
    gen.add_argument("--force", action="store_true", help="replace existing key files")
    gen.set_defaults(handler=_keys_generate)
    check = keys_sub.add_parser("check", help="load the key files each component of the file needs on this host")
    check.add_argument("--config", type=Path, required=True)
    check.add_argument("--name", action="append", default=[], help="component to check (default: all)")
    check.set_defaults(handler=_keys_check)


def _keys_generate(args: argparse.Namespace) -> int:
    from vcascade.core.keys import KeysExist, component_names, generate_keys

    names = [*(component_names(load_config(args.config)) if args.config else []), *args.name]
    if not names:
        print("vcascade keys generate: give --config FILE or --name NAME", file=sys.stderr)
        return EXIT_CONFIG
    try:
        written = generate_keys(args.dir, list(dict.fromkeys(names)), force=args.force)
    except (KeysExist, ValueError) as exc:
        print(f"vcascade keys generate: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"vcascade keys generate: {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    for secret in written:
        print(f"{secret.with_suffix('.key')}  {secret}")
    return 0


def _keys_check(args: argparse.Namespace) -> int:
    from vcascade.core.keys import component_names
    from vcascade.core.security import SecurityError, check_keys

    dep = load_config(args.config)
    if not dep.security.curve.enabled:
        print(f"{args.config}: security.curve.enabled is false: no key files needed")
        return 0
    failed = 0
    for name in args.name or component_names(dep):
        try:
            files = check_keys(dep, name)
        except (SecurityError, KeyError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
        else:
            print(f"{name}: OK ({', '.join(map(str, files))})")
    return EXIT_FAILURE if failed else 0


def _log_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=os.environ.get(FORMAT_ENV) or "text",
                        help="log lines as text or one JSON object per line (default: $VCASCADE_LOG_FORMAT, text)")


def _model_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-dir",
        default=os.environ.get("VCASCADE_MODEL_DIR"),
        help="folder holding yolox_nano.onnx (default: $VCASCADE_MODEL_DIR, then ~/.cache/vcascade/models; "
        "downloaded there when missing)",
    )


def _check(args: argparse.Namespace) -> int:
    dep: Deployment = load_config(args.file)
    print(
        f"{args.file}: OK ({len(dep.cameras)} cameras, {len(dep.edges)} edges, {len(dep.brokers)} brokers, "
        f"{len(dep.workers)} workers, {len(dep.recognizers)} recognizers)"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from vcascade.app.launcher import run_deployment
    from vcascade.core.models import ModelUnavailable

    dep = load_config(args.file)
    os.environ[FORMAT_ENV] = args.log_format  # the launcher's children inherit it
    configure_logging("WARNING", "vcascade")
    try:
        return run_deployment(dep, args.file, args.model_dir, args.log_level, args.summary_json, args.status_file)
    except ModelUnavailable as exc:
        print(f"vcascade: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _one(args: argparse.Namespace) -> int:
    from vcascade.app.launcher import exit_now
    from vcascade.core.models import ModelUnavailable
    from vcascade.core.security import SecurityError

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
    except (ModelUnavailable, KeyError, SecurityError, FileNotFoundError, ValueError) as exc:
        # a missing model file or a split point the model does not have: one line, no traceback
        print(f"vcascade: {args.kind} {args.name}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(final, indent=2, default=str))
    exit_now(args.kind, 0)  # normal exit unless a camera read still hangs: see its docstring
    return 0


if __name__ == "__main__":
    sys.exit(main())

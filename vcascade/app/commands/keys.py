"""``vcascade keys generate|check``: CurveZMQ key files (docs/SECURITY.md).

    vcascade keys generate DIR [--config FILE] [--name NAME ...] [--force]
    vcascade keys check --config FILE [--name NAME ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.core.config import load_config
from vcascade.core.transport.keys import KeysExist, component_names, generate_keys
from vcascade.core.transport.security import SecurityError, check_keys
from vcascade.core.transport.zap import check_roles


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The ``generate`` and ``check`` subcommands."""
    ops = parser.add_subparsers(dest="keys_command", required=True)
    gen = ops.add_parser("generate", help="write NAME.key and NAME.key_secret (mode 0600) per component")
    gen.add_argument("dir", type=Path, help="output folder (created, mode 0700)")
    gen.add_argument("--config", type=Path, help="one keypair per broker, edge and worker of this file")
    gen.add_argument("--name", action="append", default=[], help="a component name (repeatable)")
    gen.add_argument("--force", action="store_true", help="replace existing key files")
    check = ops.add_parser("check", help="load the key files each component of the file needs on this host")
    check.add_argument("--config", type=Path, required=True)
    check.add_argument("--name", action="append", default=[], help="component to check (default: all)")


def handle(args: argparse.Namespace) -> int:
    """Run ``generate`` or ``check``."""
    return generate(args) if args.keys_command == "generate" else check(args)


def generate(args: argparse.Namespace) -> int:
    """Write one keypair per named component; EXIT_CONFIG when none is named or a key file exists."""
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
    return EXIT_OK


def check(args: argparse.Namespace) -> int:
    """Load the key files of each component (all, or the named ones) and, for a broker or stage group, check that
    its authorized folder holds the key of every client the deployment gives each of its sockets (roles,
    :mod:`vcascade.core.transport.zap`); EXIT_FAILURE when one fails."""
    dep = load_config(args.config)
    if not dep.security.curve.enabled:
        print(f"{args.config}: security.curve.enabled is false: no key files needed")
        return EXIT_OK
    failed = 0
    for name in args.name or component_names(dep):
        try:
            files = check_keys(dep, name)
            roles = check_roles(dep, name)
        except (SecurityError, KeyError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
        else:
            admits = "".join(f"; {role} socket admits {', '.join(n) or 'nobody'}" for role, n in roles.items())
            print(f"{name}: OK ({', '.join(map(str, files))}){admits}")
    return EXIT_FAILURE if failed else EXIT_OK

"""``vcascade prometheus-config FILE``: print (or write) a Prometheus scrape config for every component of FILE
(:mod:`vcascade.app.promconfig`).

Prometheus resolves a relative ``rule_files`` entry against the folder of its configuration file, not against the
folder it was started from, so each ``--rule-file`` (relative to the current folder, as a shell gives it) is
written relative to the ``--output`` file's folder, or absolute when the config goes to stdout (its folder is not
known)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vcascade.app.commands import EXIT_CONFIG, EXIT_OK
from vcascade.app.promconfig import render
from vcascade.core.config import load_config


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, the scrape interval, rule files and the output file."""
    parser.add_argument("file", type=Path)
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between scrapes (default 15)")
    parser.add_argument("--rule-file", type=Path, action="append", default=[],
                        help="a rule file for Prometheus to load, e.g. configs/prometheus/alerts.yml (repeatable; "
                             "written relative to the --output file's folder, or absolute on stdout)")  # fmt: skip
    parser.add_argument("--token-file", help="file Prometheus reads the metrics bearer token from, as Prometheus sees it "
                        "(default: metrics.token_file; needed when metrics.token is set)")
    parser.add_argument("--ca-file", help="CA certificate Prometheus verifies HTTPS metrics with, as Prometheus sees it "
                        "(default: metrics.tls_cert_file)")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")


def rule_paths(rule_files: list[Path], output: Path | None) -> list[str]:
    """Each rule file as Prometheus will resolve it: relative to ``output``'s folder, or absolute without ``output``.

    Raises:
        FileNotFoundError: a rule file does not exist (Prometheus would refuse the whole configuration).
    """
    paths = []
    for rule in rule_files:
        path = rule.expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"--rule-file {rule}: no such file")
        paths.append(str(path) if output is None else os.path.relpath(path, output.expanduser().resolve().parent))
    return paths


def handle(args: argparse.Namespace) -> int:
    """Print the configuration, or write it to ``--output``; EXIT_CONFIG when a rule file is missing or the
    metrics token has no file for Prometheus to read it from."""
    try:
        rules = rule_paths(args.rule_file, args.output)
    except FileNotFoundError as exc:
        print(f"vcascade prometheus-config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        text = render(load_config(args.file), args.scrape_interval, rules, args.token_file, args.ca_file)
    except ValueError as exc:
        print(f"vcascade prometheus-config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK

"""``vcascade prometheus-config FILE``: print (or write) a Prometheus scrape config for every component of FILE
(:mod:`vcascade.app.promconfig`)."""

from __future__ import annotations

import argparse
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
                        help="a rule file for Prometheus to load, e.g. configs/prometheus/alerts.yml (repeatable)")
    parser.add_argument("--token-file", help="file Prometheus reads the metrics bearer token from "
                        "(default: metrics.token_file; needed when metrics.token is set)")
    parser.add_argument("--ca-file", help="CA certificate Prometheus verifies HTTPS metrics with "
                        "(default: metrics.tls_cert_file)")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")


def handle(args: argparse.Namespace) -> int:
    """Print the configuration, or write it to ``--output``."""
    try:
        text = render(load_config(args.file), args.scrape_interval, [str(p) for p in args.rule_file],
                      args.token_file, args.ca_file)  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK

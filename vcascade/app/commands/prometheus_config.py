"""``vcascade prometheus-config FILE``: print (or write) a Prometheus scrape config for every component of FILE
(:mod:`vcascade.app.promconfig`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vcascade.app.commands import EXIT_OK
from vcascade.app.promconfig import render
from vcascade.core.config import load_config


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The file, the scrape interval, rule files and the output file."""
    parser.add_argument("file", type=Path)
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between scrapes (default 15)")
    parser.add_argument("--rule-file", type=Path, action="append", default=[],
                        help="a rule file for Prometheus to load, e.g. configs/prometheus/alerts.yml (repeatable)")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")


def handle(args: argparse.Namespace) -> int:
    """Print the configuration, or write it to ``--output``."""
    text = render(load_config(args.file), args.scrape_interval, [str(p) for p in args.rule_file])
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK

"""Run one component of a deployment in the current process (used by the launcher and the CLI)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from vcascade.config import load_config

COMPONENT_KINDS = ("edge", "broker", "worker", "stage-group")


class StopFlag(Protocol):
    """A component's stop signal: ``threading.Event`` (CLI) or ``multiprocessing.Event`` (launcher)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def setup_logging(level: str, process: str) -> None:
    """One line per event, prefixed with the component, to stderr."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def run_component(
    kind: str,
    config_path: str,
    name: str,
    stop: StopFlag,
    report: Callable[[dict[str, Any]], None] | None,
    model_dir: str | None = None,
) -> None:
    """Load the deployment and run component ``kind`` named ``name`` until ``stop`` is set (edges: until done).

    Raises:
        KeyError: no component of that kind and name in the file.
        ConfigError: the file is invalid.
    """
    dep = load_config(config_path)
    section = {"edge": dep.edges, "broker": dep.brokers, "worker": dep.workers, "stage-group": dep.stage_groups}[kind]
    if name not in section:
        raise KeyError(f"no {kind} named {name!r} in {config_path} (have: {', '.join(sorted(section))})")
    if kind == "edge":
        from edge.node import run_edge

        run_edge(dep, name, stop, report, model_dir)
    elif kind == "broker":
        from broker.server import run_broker

        run_broker(dep, name, stop, report)
    elif kind == "stage-group":
        from center.stage_group import run_stage_group

        run_stage_group(dep, name, stop, report)
    else:
        from center.worker import run_worker

        run_worker(dep, name, stop, report, model_dir)

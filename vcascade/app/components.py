"""Run one component of a deployment in the current process (used by the launcher's children and the CLI).

Each kind's runner is named by its module path and resolved when a process runs it, so a broker process never
imports torch or OpenCV, and the launcher, which only starts children, imports none of the components. A kind
gets only its own settings, built from the file (``Settings.from_deployment(dep, name)``), never the whole
deployment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, Self

from vcascade.core import extras
from vcascade.core.config import Deployment, load_config
from vcascade.core.schema.broker_settings import BrokerSettings
from vcascade.core.schema.center_settings import StageGroupSettings, WorkerSettings
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.runtime.stop import StopFlag


class ComponentSettings(Protocol):
    """What one component process needs from the file (e.g. :class:`BrokerSettings`), built from it by name."""

    name: str

    @classmethod
    def from_deployment(cls, dep: Deployment, name: str) -> Self:
        """The settings of the component ``name`` of ``dep``; KeyError when there is none."""
        ...


class ComponentKind(NamedTuple):
    """Where a kind's entries live in the deployment file, what of the file one gets, and which function runs it."""

    section: str
    """Deployment attribute holding this kind's entries by name (``edges``, ``brokers``, ...)."""
    runner: str
    """``module:function`` that runs one entry: ``(settings, stop, report[, model_dir])``."""
    takes_model_dir: bool
    """True when the runner takes the ``--model-dir`` argument (it may fetch models)."""
    settings: type[ComponentSettings]
    """The settings type the runner takes (built with ``from_deployment(dep, name)``)."""
    extra: str | None
    """The optional dependency group its runner needs (pyproject.toml; None: the base install runs it)."""


COMPONENT_KINDS: dict[str, ComponentKind] = {
    "edge": ComponentKind("edges", "vcascade.edge.process:run_edge", True, EdgeSettings, extras.EDGE),
    "broker": ComponentKind("brokers", "vcascade.broker.server:run_broker", False, BrokerSettings, extras.BASE),
    "worker": ComponentKind("workers", "vcascade.center.worker:run_worker", True, WorkerSettings, extras.CENTER),
    "stage-group": ComponentKind(
        "stage_groups", "vcascade.center.stage_group:run_stage_group", False, StageGroupSettings, extras.CENTER
    ),
}
"""The component kinds a deployment file declares, by the name the CLI uses."""


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
    component = COMPONENT_KINDS[kind]
    dep = load_config(config_path)
    section = getattr(dep, component.section)
    if name not in section:
        raise KeyError(f"no {kind} named {name!r} in {config_path} (have: {', '.join(sorted(section))})")
    module, function = component.runner.split(":")
    runner = getattr(importlib.import_module(module), function)
    settings = component.settings.from_deployment(dep, name)
    if component.takes_model_dir:
        runner(settings, stop, report, model_dir)
    else:
        runner(settings, stop, report)

"""What one center process needs from the deployment file, and nothing else: a worker
(:func:`vcascade.center.worker.run_worker`) or a stage group (:func:`vcascade.center.stage_group.run_stage_group`).

Built once from the validated file by ``from_deployment``; the processes never see the whole
:class:`~vcascade.core.schema.deployment.Deployment`, so what each depends on is written here.
"""

from __future__ import annotations

from pydantic import Field

from vcascade.core.schema.base import ConfigModel, Name
from vcascade.core.schema.broker import HeartbeatConfig, SecurityConfig
from vcascade.core.schema.center import RecognizerConfig, StageGroupConfig, WorkerConfig
from vcascade.core.schema.deployment import Deployment
from vcascade.core.schema.metrics import MetricsConfig


class WorkerSettings(ConfigModel):
    """One worker's section of the file, its recognizer, where its brokers and stage group listen, and the
    file-wide settings it uses."""

    name: Name = Field(description="The worker's key in `workers`.")
    worker: WorkerConfig = Field(description="Its own section: brokers, devices, credits, batching.")
    recognizer: RecognizerConfig = Field(description="The recognizer it runs (`recognizers.<worker.recognizer>`).")
    broker_endpoints: tuple[str, ...] = Field(
        description="Backend endpoint of each of `worker.brokers`, in that order (`tcp://host:port`)."
    )
    downstream: StageGroupConfig | None = Field(
        description="The stage group running its recognizer's last stages (`stage_groups.<worker.downstream>`); "
        "None: it runs every stage."
    )
    security: SecurityConfig = Field(description="Transport security of its links (CurveZMQ).")
    heartbeat: HeartbeatConfig = Field(description="Ready interval and liveness of its broker links.")
    metrics: MetricsConfig = Field(description="Where and how it serves its metrics (bind, token, TLS).")

    @classmethod
    def from_deployment(cls, dep: Deployment, name: str) -> WorkerSettings:
        """The settings of worker ``name`` of ``dep``.

        Raises:
            KeyError: ``name`` is not a worker of ``dep``.
        """
        if name not in dep.workers:
            raise KeyError(f"no worker named {name!r} (have: {', '.join(sorted(dep.workers))})")
        cfg = dep.workers[name]
        return cls(
            name=name, worker=cfg, recognizer=dep.recognizers[cfg.recognizer],
            broker_endpoints=tuple(dep.brokers[broker].endpoint("backend") for broker in cfg.brokers),
            downstream=None if cfg.downstream is None else dep.stage_groups[cfg.downstream],
            security=dep.security, heartbeat=dep.heartbeat, metrics=dep.metrics,
        )

    @property
    def liveness_s(self) -> float:
        """A broker silent for longer is presumed gone, s: ``heartbeat.liveness * heartbeat.interval_s``."""
        return self.heartbeat.liveness * self.heartbeat.interval_s


class StageGroupSettings(ConfigModel):
    """One stage group's section of the file, the recognizer stages it runs, the workers it serves, and the
    file-wide settings it uses."""

    name: Name = Field(description="The group's key in `stage_groups`.")
    group: StageGroupConfig = Field(description="Its own section: devices, port, queue.")
    recognizer_name: Name = Field(description="The recognizer whose stages it runs (that of its workers).")
    recognizer: RecognizerConfig = Field(description="That recognizer's section.")
    first_stage: int = Field(
        ge=0, description="Index of its first stage: the stages its workers run before sending (their device count)."
    )
    workers: tuple[Name, ...] = Field(description="The workers whose `downstream` it is (admitted by CurveZMQ).")
    security: SecurityConfig = Field(description="Transport security of its socket (CurveZMQ).")
    metrics: MetricsConfig = Field(description="Where and how it serves its metrics (bind, token, TLS).")

    @classmethod
    def from_deployment(cls, dep: Deployment, name: str) -> StageGroupSettings:
        """The settings of stage group ``name`` of ``dep``; its recognizer and first stage come from the first
        worker whose ``downstream`` it is (the config check makes every such worker agree).

        Raises:
            KeyError: ``name`` is not a stage group of ``dep``, or no worker names it as ``downstream`` (the
                config check rejects that already).
        """
        if name not in dep.stage_groups:
            raise KeyError(f"no stage group named {name!r} (have: {', '.join(sorted(dep.stage_groups))})")
        workers = [worker for worker, cfg in dep.workers.items() if cfg.downstream == name]
        if not workers:
            raise KeyError(f"no worker has downstream {name!r}")
        first = dep.workers[workers[0]]
        return cls(
            name=name, group=dep.stage_groups[name], recognizer_name=first.recognizer,
            recognizer=dep.recognizers[first.recognizer], first_stage=len(first.devices), workers=tuple(workers),
            security=dep.security, metrics=dep.metrics,
        )

"""What one broker process needs from the deployment file, and nothing else (:func:`vcascade.broker.run_broker`).

Built once from the validated file by :meth:`BrokerSettings.from_deployment`; the broker never sees the whole
:class:`~vcascade.core.schema.deployment.Deployment`, so what it depends on is written here.
"""

from __future__ import annotations

from pydantic import Field

from vcascade.core.schema.base import ConfigModel, Name
from vcascade.core.schema.broker import BrokerConfig, HeartbeatConfig, SecurityConfig
from vcascade.core.schema.deployment import Deployment
from vcascade.core.schema.metrics import MetricsConfig


class BrokerSettings(ConfigModel):
    """One broker's section of the file and the file-wide settings it uses."""

    name: Name = Field(description="The broker's key in `brokers`.")
    broker: BrokerConfig = Field(description="Its own section: ports, queue bounds, attempts.")
    security: SecurityConfig = Field(description="Transport security of its two sockets (CurveZMQ).")
    heartbeat: HeartbeatConfig = Field(description="Heartbeat interval and liveness of its links.")
    metrics: MetricsConfig = Field(description="Where and how it serves its metrics (bind, token, TLS).")
    edges: tuple[Name, ...] = Field(description="The edges that send to it (the frontend admits only their keys).")
    workers: tuple[Name, ...] = Field(description="The workers that take from it (the backend admits only their keys).")

    @classmethod
    def from_deployment(cls, dep: Deployment, name: str) -> BrokerSettings:
        """The settings of broker ``name`` of ``dep``.

        Raises:
            KeyError: ``name`` is not a broker of ``dep``.
        """
        if name not in dep.brokers:
            raise KeyError(f"no broker named {name!r} (have: {', '.join(sorted(dep.brokers))})")
        return cls(
            name=name, broker=dep.brokers[name], security=dep.security, heartbeat=dep.heartbeat, metrics=dep.metrics,
            edges=tuple(edge for edge, cfg in dep.edges.items() if name in cfg.brokers),
            workers=tuple(worker for worker, cfg in dep.workers.items() if name in cfg.brokers),
        )

    @property
    def worker_timeout_s(self) -> float:
        """A worker silent for longer is declared lost, s: ``heartbeat.liveness * heartbeat.interval_s``."""
        return self.heartbeat.liveness * self.heartbeat.interval_s

"""The whole deployment file: its sections by name, restarts under `vcascade run`, and the lookups across them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vcascade.core.schema.base import ConfigModel, Name
from vcascade.core.schema.broker import BrokerConfig, HeartbeatConfig, SecurityConfig
from vcascade.core.schema.center import RecognizerConfig, StageGroupConfig, WorkerConfig
from vcascade.core.schema.edge import CameraConfig, EdgeConfig, RoiPolicyConfig, RouteConfig
from vcascade.core.schema.metrics import MetricsConfig
from vcascade.core.schema.ui import UiConfig

# ---------------------------------------------------------------- supervision


class SupervisionConfig(ConfigModel):
    """How `vcascade run` restarts processes that exit unexpectedly, and how long it lets them take to stop.

    The restart policy is vcascade/app/supervise.py; the stop, vcascade/app/launcher.py (``Launcher.stop``).
    """

    max_restarts: int = Field(
        5, ge=0, le=1000, description="Restarts of one component allowed within `window_s`; one more stops it (restart storm)."
    )
    window_s: float = Field(60.0, gt=0, le=86_400, description="Sliding window of the restart-storm limit, s.")
    backoff_initial_s: float = Field(0.5, ge=0, le=600, description="Delay before a restart, s; doubles per restart within the window.")
    backoff_max_s: float = Field(10.0, ge=0, le=3600, description="Largest delay before a restart, s.")
    stop_grace_s: float = Field(
        20.0, gt=0, le=3600,
        description="How long `vcascade run` lets a stopped broker, worker or stage group take to exit (an edge: this "
        "beyond its `drain_timeout_s`) before it kills it, s; a kill is logged and counted (`killed_at_stop` in the "
        "status file and the summary). Raise it when components are killed at stop on a loaded host.",
    )


# ---------------------------------------------------------------- deployment


class Deployment(ConfigModel):
    """The whole deployment file."""

    version: Literal[1] = Field(1, description="Schema version of this file.")
    cameras: dict[Name, CameraConfig] = Field(min_length=1, description="Cameras by name.")
    edges: dict[Name, EdgeConfig] = Field(min_length=1, description="Edge processes by name.")
    brokers: dict[Name, BrokerConfig] = Field(min_length=1, description="Broker processes by name.")
    workers: dict[Name, WorkerConfig] = Field(min_length=1, description="Center worker processes by name.")
    recognizers: dict[Name, RecognizerConfig] = Field(min_length=1, description="Recognition models by name.")
    security: SecurityConfig = Field(SecurityConfig(), description="Transport security (CurveZMQ).")
    heartbeat: HeartbeatConfig = Field(HeartbeatConfig(), description="Heartbeat interval and liveness of every broker link.")
    supervision: SupervisionConfig = Field(
        SupervisionConfig(),
        description="Restarts of crashed processes under `vcascade run` (backoff, storm limit), and the stop grace.",
    )
    stage_groups: dict[Name, StageGroupConfig] = Field(
        default_factory=dict, description="Stage-group processes by name (stages of a worker's recognizer)."
    )
    ui: UiConfig = Field(UiConfig(), description="The live view in the browser and the edges' previews (off by default).")
    metrics: MetricsConfig = Field(
        MetricsConfig(), description="Where every process serves Prometheus metrics (127.0.0.1 by default), token, TLS."
    )

    def cameras_of(self, edge: str) -> dict[str, CameraConfig]:
        """The cameras read by one edge, by name."""
        return {name: cam for name, cam in self.cameras.items() if cam.edge == edge}

    def roi_policy_of(self, camera: str) -> RoiPolicyConfig:
        """The ROI policy of one camera: its own ``roi_policy``, else its edge's ``roi.policy``."""
        cam = self.cameras[camera]
        return cam.roi_policy or self.edges[cam.edge].roi.policy

    def recognizers_served(self, edge: str) -> list[str]:
        """Names of the recognizers run by workers on any of the edge's brokers, sorted."""
        brokers = set(self.edges[edge].brokers)
        return sorted({w.recognizer for w in self.workers.values() if brokers & set(w.brokers)})

    def routes_of(self, camera: str) -> list[RouteConfig]:
        """The routes of one camera: its own ``routes``, else its edge's ``roi.routes``, else one route of every
        class to the single recognizer served to its edge, or to the file's only recognizer when no worker is on
        the edge's brokers (its ROIs then end as counted ``no_worker`` drops); ``[]`` when that is not one."""
        cam = self.cameras[camera]
        return self.routes_for(cam.edge, cam)

    def routes_for(self, edge: str, cam: CameraConfig) -> list[RouteConfig]:
        """:meth:`routes_of` for a camera config read by ``edge``, in the file or added at run time."""
        routes = cam.routes or self.edges[edge].roi.routes
        if routes:
            return list(routes)
        served = self.recognizers_served(edge) or sorted(self.recognizers)
        return [RouteConfig(recognizer=served[0])] if len(served) == 1 else []

"""What one edge process needs to know: its own section of the deployment file and the few facts it takes from
the other sections, gathered once when the edge starts (:meth:`EdgeSettings.from_deployment`).

An edge reads its ``edges.<name>`` section, its cameras, the frontend endpoints of its brokers, the heartbeat
timing, the CurveZMQ settings and the names of the file's components (who is not an operator), the ``metrics`` section (how every process serves its metrics), the ``ui`` section (its previews) and the recognizers its brokers serve (the
default route of a camera without ``routes``). Nothing else of the file reaches the edge's collaborators, so
what an edge depends on is written here, and a test builds one without a whole deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from vcascade.core.schema.broker import HeartbeatConfig, SecurityConfig
from vcascade.core.schema.deployment import Deployment
from vcascade.core.schema.edge import CameraConfig, EdgeConfig, RouteConfig
from vcascade.core.schema.metrics import MetricsConfig
from vcascade.core.schema.ui import UiConfig
from vcascade.core.transport.keys import component_names


@dataclass(frozen=True)
class EdgeSettings:
    """One edge's settings.

    Attributes:
        name: the edge's key under ``edges``.
        edge: its section.
        cameras: the cameras it reads (at start), by name.
        broker_endpoints: the frontend endpoint (``tcp://host:port``) of each of its brokers, by name, in the
            order of ``edge.brokers`` (the link's broker indices).
        heartbeat: heartbeat interval and liveness of every broker link.
        security: transport security (CurveZMQ keys).
        metrics: how the metrics endpoint is served (address, token, TLS).
        ui: the live view's settings (preview rate, width, lease).
        served_recognizers: the recognizers run by workers on its brokers, sorted; the file's recognizers when
            none is (its ROIs then end as counted ``no_worker`` drops).
        component_names: every component's name in the file (with CurveZMQ, the control socket admits the edge's
            own key and every authorized key that is none of these: the operators').
    """

    name: str
    edge: EdgeConfig
    cameras: dict[str, CameraConfig]
    broker_endpoints: dict[str, str]
    heartbeat: HeartbeatConfig
    security: SecurityConfig
    metrics: MetricsConfig
    ui: UiConfig
    served_recognizers: tuple[str, ...]
    component_names: tuple[str, ...]

    @classmethod
    def from_deployment(cls, dep: Deployment, name: str) -> EdgeSettings:
        """The settings of edge ``name`` of a validated deployment.

        Raises:
            KeyError: no edge ``name`` in the deployment.
        """
        edge = dep.edges[name]
        return cls(
            name=name,
            edge=edge,
            cameras=dep.cameras_of(name),
            broker_endpoints={broker: dep.brokers[broker].endpoint("frontend") for broker in edge.brokers},
            heartbeat=dep.heartbeat,
            security=dep.security,
            metrics=dep.metrics,
            ui=dep.ui,
            served_recognizers=tuple(dep.recognizers_served(name) or sorted(dep.recognizers)),
            component_names=tuple(component_names(dep)),
        )

    def routes_for(self, cam: CameraConfig) -> list[RouteConfig]:
        """The routes of a camera this edge reads (in the file or added at run time): its own ``routes``, else
        the edge's ``roi.routes``, else one route of every class to the single recognizer served
        (:attr:`served_recognizers`); ``[]`` when that is not one. The rule of
        :meth:`vcascade.core.schema.deployment.Deployment.routes_for`."""
        routes = cam.routes or self.edge.roi.routes
        if routes:
            return list(routes)
        served = self.served_recognizers
        return [RouteConfig(recognizer=served[0])] if len(served) == 1 else []

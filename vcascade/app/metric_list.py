"""Every metric family a vcascade process may export, read from the Prometheus registry: the metrics modules of
the three components are imported (which declares their families) and :func:`vcascade.core.telemetry.metrics.metric_families`
lists what the registry holds. No list of metrics is kept by hand: docs/OBSERVABILITY.md's table
(tools/gen_metrics_docs.py) and the dashboard and "every metric moves" tests read this one.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from vcascade.broker import metrics as broker_metrics
from vcascade.center import metrics as center_metrics
from vcascade.center.identity import metrics as identity_metrics
from vcascade.core.telemetry.metrics import MetricFamily, metric_families
from vcascade.edge import metrics as edge_metrics
from vcascade.edge.analytics import metrics as analytics_metrics
from vcascade.edge.history import metrics as history_metrics

COMPONENT_METRICS = (
    edge_metrics, analytics_metrics, history_metrics, broker_metrics, center_metrics, identity_metrics,
)
"""The modules whose import declares every ``vcascade_<component>_*`` family (edge, its analytics and history, broker,
worker and stage group, the workers' identity space); ``vcascade_build_info`` comes from
:mod:`vcascade.core.telemetry.metrics`."""


def exported_families() -> dict[str, MetricFamily]:
    """Every family a vcascade process may export (:data:`vcascade.core.telemetry.metrics.EXPORTED_PREFIXES`), by
    exposed name, sorted. A process serves its own component's families, ``vcascade_build_info`` and the
    process collector's, not all of these."""
    return metric_families(REGISTRY)

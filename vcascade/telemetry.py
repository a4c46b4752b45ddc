"""Prometheus metrics plumbing shared by every process, and the latency histogram layout.

Each process serves its own registry on its own port (no multiprocess mode). Metric names follow
``vcascade_<component>_<thing>_<unit>``: counters end in ``_total``, durations are ``_seconds`` histograms
with :data:`LATENCY_BUCKETS_S`. Each component declares its metrics in its own ``metrics`` module.
"""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY, start_http_server

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, float("inf"),
)
"""Histogram buckets for per-hop and end-to-end latency, seconds: 1 ms .. 5 s, denser where live video lives."""

BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, float("inf"))
"""Histogram buckets for micro-batch sizes (ROIs per batch)."""


class MetricsPortInUse(OSError):
    """The configured metrics port is taken. Recovery: change ``metrics_port`` in the config or stop the other process."""


def serve_metrics(port: int, host: str = "0.0.0.0") -> None:
    """Serve this process's default registry at ``http://host:port/metrics`` from a daemon thread.

    Raises:
        MetricsPortInUse: the port cannot be bound.
    """
    try:
        start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        raise MetricsPortInUse(f"metrics port {port}: {exc.strerror}") from None
    log.info("metrics on http://%s:%d/metrics", host, port)

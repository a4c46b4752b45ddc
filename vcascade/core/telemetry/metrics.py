"""Prometheus metrics plumbing shared by every process, the health endpoints, and the histogram layouts.

Each process serves its own registry on its own port (no multiprocess mode) with :func:`serve_metrics`:
``/metrics`` (Prometheus text exposition), ``/healthz`` (200 while the process runs) and ``/readyz`` (200 when
every check of :data:`vcascade.core.telemetry.health.READINESS` passes, else 503 with a JSON body naming the failing checks).
Metric names follow ``vcascade_<component>_<thing>_<unit>``: counters end in ``_total``, durations are
``_seconds`` histograms with :data:`LATENCY_BUCKETS_S`. Each component declares its metrics in its own
``metrics`` module, with a telemetry object that counts its events into them; :func:`metric_families` reads
the families back from a registry (the metric list is never kept by hand). Process CPU and memory come from
prometheus_client's default process collector (``process_cpu_seconds_total``,
``process_resident_memory_bytes``, Linux only).
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from vcascade.core.schema.metrics import MetricsConfig
from vcascade.core.telemetry.health import READINESS, Readiness
from vcascade.core.telemetry.http_server import (
    HTTP_REFUSED, BoundedHttpServer, HttpLimits, HttpPortInUse, Request, Response, serve_http, text, token_ok,
)  # fmt: skip
from vcascade.core.redact import redact_url

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, float("inf"),
)
"""Histogram buckets for per-hop and end-to-end latency, seconds: 1 ms .. 5 s, denser where live video lives."""

BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, float("inf"))
"""Histogram buckets for micro-batch sizes (ROIs per batch)."""

BUILD_INFO = Gauge(
    "vcascade_build_info", "Always 1; labels name the component kind, its name and the vcascade version (for joins).",
    ["component", "name", "version"],
)


EXPORTED_PREFIXES: tuple[str, ...] = ("vcascade_", "process_")
"""Families :func:`metric_families` reports: vcascade's own and prometheus_client's process collector (CPU,
memory, file descriptors). The ``python_*`` families of its platform and GC collectors are served too, but
describe the interpreter, not vcascade."""

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
"""Series suffixes of a histogram family in the exposition format and in PromQL."""


@dataclass(frozen=True)
class MetricFamily:
    """One exported metric family.

    Attributes:
        name: the exposed name (counters with ``_total``; histograms without ``_bucket``/``_sum``/``_count``).
        kind: ``counter``, ``gauge`` or ``histogram``.
        help: the help text (``# HELP`` line).
        labels: label names in declaration order (``le`` of histograms not included).
    """

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]


def metric_families(registry: CollectorRegistry = REGISTRY) -> dict[str, MetricFamily]:
    """Every family of ``registry`` whose name starts with one of :data:`EXPORTED_PREFIXES`, by exposed name,
    sorted by name. A family is listed from the moment it is declared, before any series of it exists.

    The caller imports the modules that declare the families first (the core imports no component: see
    :func:`vcascade.app.metric_list.exported_families`). prometheus_client has no public API for the label
    names of a family without series: they are read from its metric objects (``_labelnames``) and, for other
    collectors (the process collector), from the samples they yield.
    """
    families: dict[str, MetricFamily] = {}
    with registry._lock:  # the registry's collectors: no public accessor
        collectors = list(registry._collector_to_names)
    for collector in collectors:
        if isinstance(collector, MetricWrapperBase):
            described = [(family, tuple(collector._labelnames)) for family in collector.describe()]
        else:
            described = [(family, _sample_labels(family)) for family in collector.collect()]
        for family, labels in described:
            name = f"{family.name}_total" if family.type == "counter" else family.name
            if name.startswith(EXPORTED_PREFIXES):
                families[name] = MetricFamily(name, family.type, family.documentation, labels)
    return dict(sorted(families.items()))


def _sample_labels(family) -> tuple[str, ...]:
    """The label names of a collected family's samples, in first-seen order (``le`` and ``quantile`` left out)."""
    names = dict.fromkeys(key for sample in family.samples for key in sample.labels)
    return tuple(name for name in names if name not in ("le", "quantile"))


def family_of(series: str, families: Mapping[str, MetricFamily]) -> str | None:
    """The family in ``families`` a PromQL or exposition series name belongs to (``x_bucket`` of histogram ``x``
    is ``x``), or None when it is none of them."""
    if series in families:
        return series
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and base in families and families[base].kind == "histogram":
            return base
    return None


class MetricsPortInUse(OSError):
    """The configured metrics port is taken. Recovery: change ``metrics_port`` in the config or stop the other process."""


def safe_label(value: str) -> str:
    """A label value without credentials: URLs have their user info replaced (:func:`vcascade.core.redact.redact_url`).

    Component and camera names are config keys (no credentials); use this for anything derived from a URL.
    """
    return redact_url(value) if "://" in value else value


def serve_metrics(
    port: int, host: str | None = None, *, component: str | None = None, name: str | None = None,
    readiness: Readiness = READINESS, settings: MetricsConfig | None = None, host_names: Iterable[str] = (),
) -> BoundedHttpServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` at ``http(s)://host:port`` from a daemon thread, on the
    bounded server of :mod:`vcascade.core.telemetry.http_server` (label ``server="metrics"``).

    Args:
        port: TCP port (0: any free port, see the returned server's ``server_address``).
        host: address to bind (default: ``settings.bind``, 127.0.0.1 without settings).
        component, name: when given, ``vcascade_build_info{component,name,version}`` is set to 1.
        readiness: the checks behind ``/readyz`` (default: the process-wide ones).
        settings: the deployment's ``metrics:`` section (bind, token for ``/metrics``, TLS, allowed hosts).
        host_names: names the component is reached by (its ``host`` in the file), accepted in ``Host``.

    Returns:
        The running server (``shutdown()`` stops it; tests only, processes just exit).

    Raises:
        MetricsPortInUse: the port cannot be bound.
        ValueError: the token file or the TLS certificate/key cannot be read (message names the file).
    """
    settings = settings or MetricsConfig()
    host = settings.bind if host is None else host
    if component and name:
        BUILD_INFO.labels(component, name, _version()).set(1)
    token = settings.read_token()
    context = _tls_context(settings)
    try:
        server = serve_http(
            "metrics", host, port, _route(readiness, token), allowed_hosts=[*host_names, *settings.allowed_hosts],
            ssl_context=context, limits=HttpLimits(max_connections=settings.max_connections),
        )
    except HttpPortInUse as exc:
        raise MetricsPortInUse(f"metrics port {port}: {exc}") from None
    scheme = "https" if context else "http"
    log.info("metrics on %s://%s:%d/metrics (health: /healthz, /readyz; token %s)", scheme, host,
             server.server_address[1], "required" if token else "not required")  # fmt: skip
    return server


def _tls_context(settings: MetricsConfig) -> ssl.SSLContext | None:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"metrics.tls_cert_file/tls_key_file ({settings.tls_cert_file}): {exc}") from None
    return context


def _route(readiness: Readiness, token: str | None) -> Callable[[Request], Response]:
    """The metrics endpoint's handler: /metrics behind the token (401 counted as ``unauthorized``), health open."""

    def route(request: Request) -> Response:
        if request.path == "/metrics":
            auth = request.headers.get("authorization", "")
            bearer = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else None
            if not token_ok(bearer, token):
                HTTP_REFUSED.labels("metrics", "unauthorized").inc()
                return Response(401, body=b"unauthorized: a valid bearer token is required\n",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
            return Response(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
        if request.path == "/healthz":
            return Response(200, body=b"ok\n")
        if request.path == "/readyz":
            ready, failing = readiness.evaluate()
            body = json.dumps({"ready": ready, "failing": failing}).encode() + b"\n"
            return Response(200 if ready else 503, "application/json", body)
        return text(404, "not found: try /metrics, /healthz, /readyz")

    return route


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vcascade")
    except PackageNotFoundError:
        return "unknown"

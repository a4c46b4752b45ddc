"""A Prometheus scrape configuration for every component of a deployment (``vcascade prometheus-config FILE``,
:mod:`vcascade.app.commands.prometheus_config`).

One scrape job per component kind (``vcascade-edge``, ``vcascade-broker``, ``vcascade-worker``); each target is
one component's metrics port, with ``instance`` set to the component's name (so queries read
``instance="edge-1"`` rather than an address) and, for a worker, ``recognizer`` to the recognizer it runs. The
same target list serves ``vcascade status``.
"""

from __future__ import annotations

import copy
import ssl
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import yaml

from vcascade.core.config import ConfigError, Deployment

JOB_PREFIX = "vcascade-"
"""Scrape job names are ``vcascade-<kind>``."""
LOCAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class MetricsTarget:
    """One component's metrics endpoint: ``kind`` (edge/broker/worker), ``name``, ``host`` and ``port``;
    ``recognizer``: the recognizer a worker runs ("" for other kinds); ``scheme`` ``https`` when the deployment
    serves metrics over TLS (``ca_file``: the certificate that verifies it); ``token``: the bearer token
    ``/metrics`` needs (never shown in ``repr``)."""

    kind: str
    name: str
    host: str
    port: int
    recognizer: str = ""
    scheme: str = "http"
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    def request(self, path: str = "/metrics") -> tuple[urllib.request.Request, ssl.SSLContext | None]:
        """A request for ``path`` carrying the token, and the TLS context verifying the endpoint (None: HTTP)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        context = ssl.create_default_context(cafile=self.ca_file) if self.scheme == "https" else None
        return urllib.request.Request(self.url(path), headers=headers), context

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def url(self, path: str = "/metrics") -> str:
        """``http(s)://host:port<path>``."""
        return f"{self.scheme}://{self.address}{path}"


def metrics_targets(dep: Deployment, with_token: bool = True) -> list[MetricsTarget]:
    """Every component's metrics endpoint, brokers first. A component's host is its ``host`` field when it has
    one (brokers), else 127.0.0.1 (components without an address in the file run beside the observer). Scheme,
    token (read only ``with_token``) and certificate follow the ``metrics:`` section.

    Raises:
        ConfigError: ``metrics.token_file`` cannot be read.
    """
    settings, targets = dep.metrics, []
    scheme = "https" if settings.tls_cert_file else "http"
    try:
        token = settings.read_token() if with_token else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for kind, section in (("broker", dep.brokers), ("worker", dep.workers), ("edge", dep.edges)):
        for name, cfg in section.items():
            host = getattr(cfg, "host", None) or LOCAL_HOST
            targets.append(MetricsTarget(kind, name, host, cfg.metrics_port, getattr(cfg, "recognizer", ""),
                                         scheme, token, settings.tls_cert_file))  # fmt: skip
    return targets


def prometheus_config(
    dep: Deployment, scrape_interval_s: float = 15.0, rule_files: list[str] | None = None,
    token_file: str | None = None, ca_file: str | None = None,
) -> dict[str, Any]:
    """The Prometheus configuration (as a dict ready for YAML) scraping every component of ``dep``.

    With ``metrics.token``/``token_file`` set, every job sends ``Authorization: Bearer`` read from a
    ``credentials_file`` (the token itself is never written); with ``metrics.tls_cert_file``, jobs scrape
    ``https`` and verify the certificate with ``tls_config.ca_file``.

    Args:
        dep: the deployment.
        scrape_interval_s: seconds between scrapes (also the evaluation interval of the rules).
        rule_files: alerting/recording rule files to load (paths as Prometheus will see them).
        token_file: the file Prometheus reads the token from (default: ``metrics.token_file``).
        ca_file: the CA certificate Prometheus verifies the metrics endpoints with (default:
            ``metrics.tls_cert_file``, right for a self-signed certificate).

    Raises:
        ValueError: ``metrics.token`` is set and no file for Prometheus to read it from is known.
    """
    settings = dep.metrics
    token_file = token_file or settings.token_file
    if settings.token is not None and token_file is None:
        raise ValueError("metrics.token is set: give --token-file FILE (a file holding the same token, which "
                         "Prometheus reads), or set metrics.token_file instead of metrics.token")  # fmt: skip
    job_extra: dict[str, Any] = {}
    if settings.tls_cert_file:
        job_extra["scheme"] = "https"
        job_extra["tls_config"] = {"ca_file": ca_file or settings.tls_cert_file}
    if token_file is not None:
        job_extra["authorization"] = {"type": "Bearer", "credentials_file": token_file}
    interval = _duration(scrape_interval_s)
    jobs: dict[str, list[dict[str, Any]]] = {}
    for target in metrics_targets(dep, with_token=False):  # Prometheus reads the token from its own file
        labels = {"instance": target.name} | ({"recognizer": target.recognizer} if target.recognizer else {})
        jobs.setdefault(target.kind, []).append({"targets": [target.address], "labels": labels})
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": f"{JOB_PREFIX}{kind}", "metrics_path": "/metrics", **copy.deepcopy(job_extra),
             "static_configs": statics}
            for kind, statics in jobs.items()
        ],
    }
    if rule_files:
        config["rule_files"] = list(rule_files)
    return config


def render(
    dep: Deployment, scrape_interval_s: float = 15.0, rule_files: list[str] | None = None,
    token_file: str | None = None, ca_file: str | None = None,
) -> str:
    """:func:`prometheus_config` as YAML text, with a header comment.

    Raises:
        ValueError: see :func:`prometheus_config`.
    """
    body = yaml.safe_dump(prometheus_config(dep, scrape_interval_s, rule_files, token_file, ca_file), sort_keys=False)
    return "# generated by `vcascade prometheus-config`; one job per component kind, instance = component name\n" + body


def _duration(seconds: float) -> str:
    """Prometheus duration text: whole seconds as ``15s``, else milliseconds (``500ms``)."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{round(seconds * 1000)}ms"

"""The ``metrics:`` section: where every process serves Prometheus ``/metrics`` (and ``/healthz``, ``/readyz``)
on its ``metrics_port`` (vcascade/core/telemetry/metrics.py), and what a scraper must present.

Safe by default: every process binds 127.0.0.1, so only the host itself can scrape. A Prometheus on another host
needs ``bind`` set to an address it reaches, and then a ``token`` (or ``token_file``); ``tls_cert_file`` and
``tls_key_file`` add HTTPS. ``vcascade prometheus-config`` writes the matching scrape configuration.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from vcascade.core.schema.base import ConfigModel, key_problem
from vcascade.core.schema.ui import TOKEN_MIN_CHARS, is_loopback


class MetricsConfig(ConfigModel):
    """How every process of the deployment serves its metrics (docs/SECURITY.md, "Network surfaces")."""

    bind: str = Field(
        "127.0.0.1", description="Address every process binds its metrics port to (`0.0.0.0`: all); any "
        "non-loopback address needs `token` or `token_file`.",
    )
    token: SecretStr | None = Field(
        None,
        description="Bearer token a scraper must send for /metrics, 16 characters at least (give it as `${VAR}`, "
        "never in the file); /healthz and /readyz stay open for probes.",
    )
    token_file: str | None = Field(
        None, description="File holding the bearer token instead of `token` (read at start, whitespace stripped); "
        "Prometheus can read the same file (`credentials_file`).",
    )
    tls_cert_file: str | None = Field(None, description="PEM certificate (chain) for HTTPS; needs `tls_key_file`.")
    tls_key_file: str | None = Field(None, description="PEM private key of `tls_cert_file`.")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Names accepted in the `Host` header besides loopback names, the bind address and the "
        "component's `host` (`*`: any, e.g. behind Kubernetes probes that use the pod IP); others get 421.",
    )
    max_connections: int = Field(
        64, ge=4, le=4096, description="Connections one process's metrics port holds at once, at most (lowered "
        "to an eighth of the free file descriptors).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> MetricsConfig:
        if self.token is not None and len(self.token.get_secret_value()) < TOKEN_MIN_CHARS:
            raise key_problem("token", str(self.token), f"a token needs {TOKEN_MIN_CHARS} characters at least")
        if self.token is not None and self.token_file is not None:
            raise key_problem("token_file", self.token_file, "give token or token_file, not both")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise key_problem("tls_cert_file", self.tls_cert_file, "tls_cert_file and tls_key_file go together")
        if not is_loopback(self.bind) and self.token is None and self.token_file is None:
            raise key_problem(
                "bind", self.bind, "a non-loopback address needs metrics.token (e.g. token: ${VCASCADE_METRICS_TOKEN}) "
                "or metrics.token_file",
            )
        return self

    def read_token(self) -> str | None:
        """The bearer token (from ``token`` or ``token_file``), None when open.

        Raises:
            ValueError: the token file cannot be read or holds fewer than 16 characters (message names the file).
        """
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is None:
            return None
        try:
            with open(self.token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"metrics.token_file {self.token_file}: {exc.strerror}") from None
        if len(token) < TOKEN_MIN_CHARS:
            raise ValueError(f"metrics.token_file {self.token_file}: the token needs {TOKEN_MIN_CHARS} characters at least")
        return token

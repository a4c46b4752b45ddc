"""Sinks that deliver over the network (MQTT, HTTP webhook) and the delivery settings every sink shares.

Every sink has a bounded queue drained by its own delivery thread (:mod:`vcascade.edge.sinks.queue`): ``queue_max``
records wait at most (a full queue drops its oldest record, counted as ``queue_full``), and at shutdown the thread
gets ``drain_timeout_s`` to deliver what is queued; what is left then is counted as ``shutdown``. Secrets
(``password``, ``auth_header``) come from the environment with ``${VAR}`` (:mod:`vcascade.core.config`) and are
held as ``SecretStr``, so they never show in a printed config.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from vcascade.core.schema.base import ConfigModel, Port, key_problem

QUEUE_MAX_DEFAULT = 10_000
"""Records a sink's queue holds by default: minutes of records of a few busy cameras (about 1 KB each in memory)."""


def queue_max_field() -> Any:
    """The ``queue_max`` field of every sink config: the bound of its delivery queue, in records."""
    return Field(
        QUEUE_MAX_DEFAULT, ge=1, le=10_000_000,
        description="Records waiting for this sink's delivery thread, at most; when full the oldest is dropped "
        "(counted as `queue_full`).",
    )


def drain_timeout_field(default_s: float = 5.0) -> Any:
    """The ``drain_timeout_s`` field of every sink config: how long shutdown waits for the queue to empty, s."""
    return Field(
        default_s, ge=0, le=3600,
        description="At shutdown, wait this long (s) for queued records to be delivered; the rest is counted as "
        "`shutdown`.",
    )


class MqttSinkConfig(ConfigModel):
    """Publish each record as JSON to an MQTT broker, QoS 1, topic ``<topic_prefix>/<camera>/<kind>``
    (kind: ``result``, ``event``, ``event_update``, ``camera_state``). A record counts as delivered when its PUBACK
    arrives; the client reconnects by itself with a capped exponential backoff."""

    type: Literal["mqtt"] = Field(description="Sink kind.")
    host: str = Field(min_length=1, description="MQTT broker host name or address.")
    port: Port = Field(1883, description="MQTT broker port (8883 is the usual TLS port).")
    topic_prefix: str = Field(
        "vcascade", pattern=r"^[^#+\x00]+$",
        description="First levels of every topic, e.g. `site-a/vcascade` (no `#` or `+`; no leading/trailing `/`).",
    )
    client_id: str = Field(
        "", max_length=128, description="MQTT client id ('': `vcascade-<edge>-<pid>`, unique per process)."
    )
    username: str | None = Field(None, description="User name (e.g. `${MQTT_USER}`); None: anonymous.")
    password: SecretStr | None = Field(None, description="Password (e.g. `${MQTT_PASSWORD}`); needs `username`.")
    tls: bool = Field(False, description="Connect over TLS (server certificate checked against `ca_file`, or the "
                      "system's CA store when `ca_file` is None).")
    ca_file: str | None = Field(None, description="PEM file of the CA that signed the broker's certificate.")
    cert_file: str | None = Field(None, description="PEM client certificate for TLS client authentication.")
    key_file: str | None = Field(None, description="PEM private key of `cert_file`.")
    keepalive_s: int = Field(30, ge=5, le=3600, description="MQTT keep-alive interval, s.")
    reconnect_min_s: float = Field(0.5, gt=0, le=60, description="First reconnect delay after a lost connection, s.")
    reconnect_max_s: float = Field(30.0, gt=0, le=3600, description="Longest reconnect delay (doubling from "
                                   "`reconnect_min_s`), s.")
    max_in_flight: int = Field(100, ge=1, le=65535, description="Records published and not yet acknowledged "
                               "(PUBACK), at most; the rest waits in the queue.")
    queue_max: int = queue_max_field()
    drain_timeout_s: float = drain_timeout_field()

    @model_validator(mode="after")
    def _consistent(self) -> MqttSinkConfig:
        if self.password is not None and self.username is None:
            raise key_problem("password", "***", "a password needs a `username`")
        if self.topic_prefix.startswith("/") or self.topic_prefix.endswith("/"):
            raise key_problem("topic_prefix", self.topic_prefix, "must not start or end with '/'")
        if (self.cert_file is None) != (self.key_file is None):
            raise key_problem("cert_file", self.cert_file, "`cert_file` and `key_file` go together")
        if (self.ca_file or self.cert_file) and not self.tls:
            raise key_problem("tls", self.tls, "`ca_file`/`cert_file` are given: set `tls: true`")
        return self


class WebhookSinkConfig(ConfigModel):
    """POST records as JSON arrays (batches) to an HTTP endpoint. A batch is sent when ``batch_max`` records wait
    or the oldest has waited ``batch_wait_s``. A connection error, a timeout, HTTP 408, 429 or 5xx is retried
    with a capped, fully jittered exponential backoff up to ``max_attempts`` sends; another 4xx is counted as
    ``rejected`` (the receiver refuses it; sending it again would not help)."""

    type: Literal["webhook"] = Field(description="Sink kind.")
    url: str = Field(pattern=r"^https?://", description="Endpoint, e.g. `https://hooks.example.com/vcascade`.")
    auth_header: SecretStr | None = Field(
        None, description="Value of the `Authorization` header, e.g. `Bearer ${WEBHOOK_TOKEN}`; None: no header."
    )
    batch_max: int = Field(100, ge=1, le=100_000, description="Records per POST, at most.")
    batch_wait_s: float = Field(1.0, ge=0, le=3600, description="Longest wait for a fuller batch, s.")
    timeout_s: float = Field(5.0, gt=0, le=600, description="Connect and read timeout of one POST, s.")
    deadline_s: float = Field(15.0, gt=0, le=3600, description="Whole time one POST may take, answer included, s; a "
                              "receiver still sending then is cut off and the attempt counted as `deadline`.")
    max_attempts: int = Field(5, ge=1, le=1000, description="Sends of one batch at most, the first included; then "
                              "its records are counted as `retries_exhausted`.")
    backoff_initial_s: float = Field(0.5, gt=0, le=60, description="Cap of the first retry delay, s.")
    backoff_max_s: float = Field(30.0, gt=0, le=3600, description="Largest cap of a retry delay, s.")
    verify_tls: bool = Field(True, description="Check the server's TLS certificate (https).")
    queue_max: int = queue_max_field()
    drain_timeout_s: float = drain_timeout_field()

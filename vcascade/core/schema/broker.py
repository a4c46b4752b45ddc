"""The broker links of the deployment file: broker processes, heartbeats, and their transport security."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vcascade.core.schema.base import ConfigModel, Port

MIB = 1024 * 1024
"""Bytes in a mebibyte."""

# ---------------------------------------------------------------- broker


class BrokerConfig(ConfigModel):
    """One broker process: ROUTER for edges (frontend), ROUTER for workers (backend)."""

    host: str = Field("127.0.0.1", description="Address peers connect to.")
    bind: str | None = Field(None, description="Address the broker binds (default: `host`; `*` for all).")
    frontend_port: Port = Field(description="Port edges connect to.")
    backend_port: Port = Field(description="Port workers connect to.")
    queue_max: int = Field(10_000, ge=1, description="ROIs waiting for worker credit, at most (oldest dropped).")
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")
    max_attempts: int = Field(
        2, ge=1, le=100,
        description="Dispatches of one ROI at most: a dead worker's ROIs are re-dispatched until this many "
        "attempts, then dropped as `worker_lost` (2 = one re-dispatch).",
    )
    queue_max_bytes: int = Field(
        512 * MIB, ge=1,
        description="Bytes of queued ROIs (header and crop as received) at most, all edges and recognizers together; "
        "above it the queue holding the most bytes drops its oldest ROI (`queue_full`, or `no_worker` when no "
        "worker runs its recognizer). Default 512 MiB.",
    )
    recognizer_queue_max_bytes: int = Field(
        256 * MIB, ge=1,
        description="Bytes of ROIs queued for one recognizer at most (one without workers cannot take all memory); "
        "above it that recognizer's heaviest queue drops its oldest ROI. Default 256 MiB.",
    )
    edge_queue_max_bytes: int = Field(
        256 * MIB, ge=1,
        description="Bytes of ROIs queued from one edge at most; above it that edge's oldest ROI is dropped. An ROI "
        "heavier than any of the three byte bounds alone is dropped at once. Default 256 MiB.",
    )
    max_workers: int = Field(
        1024, ge=1, le=65_536,
        description="Workers registered at once, at most. At the bound a new worker takes the place of the least "
        "useful one (never answered, or owes answers past `answer_timeout_s`); one that answered and owes "
        "nothing is never evicted.",
    )
    answer_timeout_s: float = Field(
        20.0, gt=0, le=3600,
        description="Seconds a worker may hold an ROI unanswered; then the ROI is taken back (re-dispatched or "
        "dropped as `worker_lost`, as for a lost worker) and costs the worker one credit until it answers again.",
    )
    no_worker_wait_s: float = Field(
        10.0, gt=0, le=3600,
        description="Seconds an ROI may wait for a recognizer no registered worker runs; then it is dropped as "
        "`no_worker`. Keep it below the edges' `roi_timeout_s`, which otherwise ends it as `timeout`.",
    )

    def endpoint(self, side: Literal["frontend", "backend"], *, bind: bool = False) -> str:
        """ZeroMQ tcp endpoint of one side, for connecting peers or (``bind=True``) for the broker itself."""
        port = self.frontend_port if side == "frontend" else self.backend_port
        host = (self.bind or self.host) if bind else self.host
        return f"tcp://{host}:{port}"


class HeartbeatConfig(ConfigModel):
    """Liveness between brokers and their peers (Paranoid Pirate pattern, ZeroMQ Guide chapter 4)."""

    interval_s: float = Field(1.0, gt=0, le=60, description="Seconds between heartbeats on every link, both ways.")
    liveness: int = Field(3, ge=1, le=100, description="Intervals without any message after which a peer is dead.")


# ---------------------------------------------------------------- security


class CurveConfig(ConfigModel):
    """CurveZMQ encryption and authentication of the tcp links between brokers and their edges and workers.

    Key files are made by ``vcascade keys generate DIR``: ``NAME.key`` (public) and ``NAME.key_secret``
    (secret, mode 0600) per component name. Each host holds only its own ``NAME.key_secret`` and the public
    ``BROKER.key`` of the brokers it connects to; a broker holds the public keys of the clients it accepts. A
    key's file name gives its role (:mod:`vcascade.core.transport.zap`): a broker admits its edges' keys on its frontend
    and its workers' on its backend only.
    """

    enabled: bool = Field(False, description="Encrypt and authenticate every broker link with CurveZMQ.")
    keys_dir: str = Field(
        "keys",
        description="Folder with this host's `NAME.key_secret` and the brokers' public `BROKER.key` files "
        "(relative paths: to the working directory).",
    )
    authorized_dir: str | None = Field(
        None,
        description="Broker side: folder whose `*.key` public keys are the edges and workers allowed to connect, "
        "each named after its component (`NAME.key`), which gives its role: edges on the frontend, workers on the "
        "backend (None: every `*.key` in `keys_dir`).",
    )


class SecurityConfig(ConfigModel):
    """Transport security of the deployment (docs/SECURITY.md)."""

    curve: CurveConfig = Field(CurveConfig(), description="CurveZMQ on the broker links.")
    allow_plaintext_remote: bool = Field(
        False, description="Allow a broker to bind a non-loopback address with CurveZMQ disabled (trusted networks)."
    )

"""The ``ui:`` section: the live view in the browser (``vcascade ui FILE``, vcascade/app/ui/) and the edges'
on-demand annotated previews it shows (``edges.<name>.preview_port``, vcascade/edge/preview/hub.py).

Safe by default: the view is off, read-only, and binds 127.0.0.1. Any other bind address, for the view or for
an edge's preview endpoint, needs ``token`` (checked by
:func:`vcascade.core.schema.checks.network.check_previews`); keep it in the environment
(``token: ${VCASCADE_UI_TOKEN}``), never in the file.
"""

from __future__ import annotations

import ipaddress
from pydantic import Field, model_validator

from vcascade.core.schema.base import ConfigModel, Port, key_problem

TOKEN_MIN_CHARS = 16
"""Shortest accepted token: 16 characters of a random string are beyond guessing over HTTP."""


class UiConfig(ConfigModel):
    """The live view: one read-only page for the whole deployment (docs/OBSERVABILITY.md, "Live view")."""

    enabled: bool = Field(False, description="Start the view with `vcascade run` (`vcascade ui FILE` starts it anyway).")
    bind: str = Field(
        "127.0.0.1", description="Address the view binds; any non-loopback address needs `token`."
    )
    port: Port = Field(8090, description="Port of the view (http://bind:port/).")
    token: str | None = Field(
        None, min_length=TOKEN_MIN_CHARS,
        description="Shared secret for the view and the edges' preview endpoints (give it as `${VAR}`); required "
        "when either binds a non-loopback address. Sent as `Authorization: Bearer`, `?token=` or the cookie the "
        "view sets from it.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Names the view and the previews answer to in the `Host` header besides loopback names, the "
        "bind address and the edge's `host` (e.g. the view's DNS name behind a proxy; `*`: any). Others get 421, "
        "which stops DNS rebinding.",
    )
    preview_fps: float = Field(
        2.0, gt=0, le=15, description="Annotated previews per second an edge encodes for a watched camera, at most."
    )
    preview_width_px: int = Field(
        640, ge=64, le=1920, description="Width of a preview, pixels at most (narrower frames are not enlarged)."
    )
    watch_lease_s: float = Field(
        5.0, gt=0, le=300, description="An edge keeps encoding a camera's previews this long after its last request, s."
    )
    recent_results: int = Field(
        50, ge=1, le=1000, description="Recent result lines (and events) an edge keeps per watched camera."
    )

    @model_validator(mode="after")
    def _remote_needs_token(self) -> UiConfig:
        if not is_loopback(self.bind) and self.token is None:
            raise key_problem("bind", self.bind, "a non-loopback address needs ui.token (e.g. token: ${VCASCADE_UI_TOKEN})")
        return self


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; ``*``, ``0.0.0.0``, other names and addresses are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def preview_bind(host: str) -> str:
    """The address an HTTP server binds for a component's ``bind``/``host`` (``*`` is every address)."""
    return "0.0.0.0" if host == "*" else host


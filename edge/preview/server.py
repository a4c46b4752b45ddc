"""The edge's preview endpoint for the live view: HTTP on ``edges.<name>.preview_port`` (read-only, token-gated
like the view, :mod:`vcascade.core.telemetry.http`).

=========================  ==========================================================================
path                       answer
=========================  ==========================================================================
``/cameras``               JSON ``{"edge", "cameras": {name: {state, reason, detail, error, live, removal}}}``
``/preview/<camera>.jpg``  the camera's latest annotated preview (JPEG as the redaction step made it, counted
                           in ``vcascade_edge_images_out_total{exit="preview"}``; headers ``X-Frame-Seq``,
                           ``X-Stream-Ts-Ms``, ``X-Boxes``: the boxes drawn, JSON ``[[x1, y1, x2, y2], ...]`` in
                           preview pixels); starts or extends its watch lease; 204 before the first preview,
                           404 for a camera this edge does not read
``/recent/<camera>``       JSON ``{"results": [...], "events": [...]}``: its recent lines while watched
=========================  ==========================================================================

Bound at the edge's ``bind`` (else ``host``); a non-loopback address needs ``ui.token`` (config check).
Camera URLs never appear: errors are redacted by the reader (:func:`vcascade.core.redact.redact_url`) and
URLs are not served.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.telemetry.http import Request, Response, json_response, serve_read_only, text
from vcascade.core.telemetry.http_server import BoundedHttpServer
from vcascade.core.redact import redact_url
from vcascade.core.schema.ui import preview_bind
from vcascade.edge.metrics import EdgeTelemetry
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.privacy.redaction import require_redacted
from vcascade.edge.capture.source import CameraReader

log = logging.getLogger(__name__)


def camera_states(readers: list[CameraReader]) -> dict[str, dict[str, Any]]:
    """Per camera: ``state``, ``reason`` and ``detail`` of its last change (``no frame for 2.0 s``), redacted
    ``error`` (failed cameras), ``live``, ``removal``."""
    states = {}
    for r in readers:
        history = r.machine.history()
        states[r.camera] = {
            "state": r.state, "reason": r.machine.reason, "detail": redact_url(history[-1].detail) if history else "",
            "error": redact_url(r.error) if r.error else None, "live": r.live, "removal": r.removal,
        }
    return states


def serve_previews(
    settings: EdgeSettings, hub: PreviewHub, readers: Callable[[], list[CameraReader]]
) -> BoundedHttpServer | None:
    """Start the preview endpoint when ``edges.<edge>.preview_port`` is set (None otherwise). ``Host`` may name
    loopback, the edge's ``host``/``bind`` or one of ``ui.allowed_hosts`` (421 otherwise).

    Raises:
        vcascade.core.telemetry.http.HttpPortInUse: the port cannot be bound.
    """
    edge, cfg, ui = settings.name, settings.edge, settings.ui
    if cfg.preview_port is None:
        return None
    telemetry = EdgeTelemetry(edge)

    def route(request: Request) -> Response:
        current = {r.camera: r for r in readers()}
        path = request.path
        if path == "/cameras":
            return json_response({"edge": edge, "cameras": camera_states(list(current.values()))})
        if path.startswith("/preview/") and path.endswith(".jpg"):
            return _preview(path[len("/preview/"):-len(".jpg")], current)
        if path.startswith("/recent/") and path[len("/recent/"):] in current:
            return json_response(hub.recent(path[len("/recent/"):]))
        return text(404, "not found: /cameras, /preview/CAMERA.jpg, /recent/CAMERA")

    def _preview(camera: str, current: dict[str, CameraReader]) -> Response:
        if camera not in current:
            return text(404, "no such camera on this edge")
        hub.watch(camera)
        preview = hub.latest(camera)
        if preview is None:
            return Response(204, "image/jpeg")
        image = require_redacted(preview.image, "preview")
        telemetry.image_out("preview", image.redacted)
        return Response(200, "image/jpeg", image.jpeg, {
            "X-Frame-Seq": str(preview.frame_seq), "X-Stream-Ts-Ms": f"{preview.stream_ts_ms:.1f}",
            "X-Encoded-Unix-Ms": f"{preview.encoded_unix_ms:.0f}", "X-Boxes": json.dumps(preview.boxes_xyxy_px, separators=(",", ":")),
        })

    host = preview_bind(cfg.bind or cfg.host)
    names = [cfg.host, *(cfg.bind and [cfg.bind] or []), *ui.allowed_hosts]
    server = serve_read_only(host, cfg.preview_port, route, "preview", token=ui.token, allowed_hosts=names)
    log.info("edge %s: previews on http://%s:%d/ (token %s)", edge, host, server.server_address[1],
             "required" if ui.token else "not required")  # fmt: skip
    return server

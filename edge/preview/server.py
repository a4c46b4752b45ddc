"""The edge's preview endpoint for the live view: HTTP on ``edges.<name>.preview_port`` (read-only, token-gated
like the view, :mod:`vcascade.core.telemetry.http`).

=========================  ==========================================================================
path                       answer
=========================  ==========================================================================
``/cameras``               JSON ``{"edge", "cameras": {name: {state, reason, detail, error, live, removal}}}``
``/preview/<camera>.jpg``  the camera's latest annotated preview (JPEG; headers ``X-Frame-Seq``,
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
from http.server import ThreadingHTTPServer
from typing import Any

from vcascade.core.config import Deployment
from vcascade.core.telemetry.http import ReadOnlyHandler, serve_read_only
from vcascade.core.redact import redact_url
from vcascade.core.schema.ui import preview_bind
from vcascade.edge.preview.hub import PreviewHub
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
    edge: str, dep: Deployment, hub: PreviewHub, readers: Callable[[], list[CameraReader]]
) -> ThreadingHTTPServer | None:
    """Start the preview endpoint when ``edges.<edge>.preview_port`` is set (None otherwise).

    Raises:
        vcascade.core.telemetry.http.HttpPortInUse: the port cannot be bound.
    """
    cfg = dep.edges[edge]
    if cfg.preview_port is None:
        return None

    class PreviewHandler(ReadOnlyHandler):
        token = dep.ui.token

        def route(self, path: str, query: dict[str, list[str]]) -> None:
            current = {r.camera: r for r in readers()}
            if path == "/cameras":
                self.reply_json({"edge": edge, "cameras": camera_states(list(current.values()))})
            elif path.startswith("/preview/") and path.endswith(".jpg"):
                self._preview(path[len("/preview/"):-len(".jpg")], current)
            elif path.startswith("/recent/") and path[len("/recent/"):] in current:
                self.reply_json(hub.recent(path[len("/recent/"):]))
            else:
                self.reply(404, "text/plain; charset=utf-8", b"not found: /cameras, /preview/CAMERA.jpg, /recent/CAMERA\n")

        def _preview(self, camera: str, current: dict[str, CameraReader]) -> None:
            if camera not in current:
                self.reply(404, "text/plain; charset=utf-8", b"no such camera on this edge\n")
                return
            hub.watch(camera)
            preview = hub.latest(camera)
            if preview is None:
                self.reply(204, "image/jpeg", b"")
                return
            self.reply(200, "image/jpeg", preview.jpeg, {
                "X-Frame-Seq": str(preview.frame_seq), "X-Stream-Ts-Ms": f"{preview.stream_ts_ms:.1f}",
                "X-Encoded-Unix-Ms": f"{preview.encoded_unix_ms:.0f}", "X-Boxes": json.dumps(preview.boxes_xyxy_px, separators=(",", ":")),
            })

    host = preview_bind(cfg.bind or cfg.host)
    server = serve_read_only(host, cfg.preview_port, PreviewHandler, f"edge-preview:{edge}")
    log.info("edge %s: previews on http://%s:%d/ (token %s)", edge, host, server.server_address[1],
             "required" if dep.ui.token else "not required")  # fmt: skip
    return server

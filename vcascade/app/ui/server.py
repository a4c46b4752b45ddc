"""The live view's HTTP server (``vcascade ui FILE``, or ``vcascade run`` with ``ui.enabled``): one read-only page
for the whole deployment, its scripts, and a small JSON API over :class:`~vcascade.app.ui.deployment_view.DeploymentView`.

===================================  ===================================================================
path                                 answer
===================================  ===================================================================
``/``                                the page (grid; ``#/camera/NAME`` shows one camera), no build step
``/static/<file>``                   its script and style sheet (package data of ``vcascade.app.ui``)
``/api/overview``                    JSON: cameras (state, reason, fps, ROIs/s, drops, e2e p50/p99 ms),
                                     brokers and workers (alive, credits, queue depth, stage times),
                                     components (ready / not ready / unreachable, why)
``/api/cameras/<name>/frame.jpg``    the camera's latest annotated preview (204 before the first one)
``/api/cameras/<name>/stream.mjpg``  MJPEG (``multipart/x-mixed-replace``) of its previews, at most
                                     ``ui.preview_fps`` per second
``/api/cameras/<name>/recent``       JSON: its recent result lines, events, per-hop latency breakdown
``/api/events``                      JSON: the recent events of every camera (the event feed)
===================================  ===================================================================

Read-only (:mod:`vcascade.core.telemetry.http`: GET and HEAD only), bound to ``ui.bind`` (127.0.0.1 unless
configured; any other address needs ``ui.token``, a config check). A request that presents the token as
``?token=`` gets it back as an HttpOnly, SameSite=Strict cookie, so the page's own requests carry it.
"""

from __future__ import annotations

import logging
import time
from http.server import ThreadingHTTPServer
from importlib import resources
from urllib.parse import unquote

from vcascade.app.ui.deployment_view import DeploymentView, EdgeUnreachable
from vcascade.core.config import Deployment
from vcascade.core.telemetry.http import TOKEN_COOKIE, ReadOnlyHandler, serve_read_only

log = logging.getLogger(__name__)

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".png": "image/png"}  # fmt: skip
"""Content types of the files in ``static/``; other files are not served."""
MJPEG_BOUNDARY = "vcascade-frame"
STREAM_MAX_S = 3600.0
"""An MJPEG stream ends after this long (the page reopens it), s: no connection is held forever."""


def static_file(name: str) -> bytes | None:
    """The bytes of ``static/<name>`` shipped in the package, or None for an unknown or unsafe name."""
    if "/" in name or name.startswith(".") or not any(name.endswith(ext) for ext in STATIC_TYPES):
        return None
    item = resources.files("vcascade.app.ui").joinpath("static", name)
    return item.read_bytes() if item.is_file() else None


def make_handler(view: DeploymentView) -> type[ReadOnlyHandler]:
    """The request handler class serving ``view`` (token from ``view.dep.ui.token``)."""

    class ViewHandler(ReadOnlyHandler):
        token = view.dep.ui.token

        def route(self, path: str, query: dict[str, list[str]]) -> None:
            if path == "/":
                self._static("index.html", query)
            elif path.startswith("/static/"):
                self._static(path[len("/static/"):], query)
            elif path == "/api/overview":
                self.reply_json(view.overview())
            elif path == "/api/events":
                self.reply_json(view.events())
            elif path.startswith("/api/cameras/"):
                camera, _, what = unquote(path[len("/api/cameras/"):]).partition("/")
                self._camera(camera, what)
            else:
                self.reply(404, "text/plain; charset=utf-8", b"not found\n")

        def _static(self, name: str, query: dict[str, list[str]]) -> None:
            body = static_file(name)
            if body is None:
                self.reply(404, "text/plain; charset=utf-8", b"not found\n")
                return
            headers = {"Content-Security-Policy": "default-src 'self'; img-src 'self' blob:"}
            if query.get("token") and self.token:  # keep the token for the page's own requests
                headers["Set-Cookie"] = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            self.reply(200, STATIC_TYPES[name[name.rindex("."):]], body, headers)

        def _camera(self, camera: str, what: str) -> None:
            try:
                if what == "frame.jpg":
                    preview = view.preview(camera)
                    if preview is None:
                        self.reply(204, "image/jpeg", b"")
                    else:
                        self.reply(200, "image/jpeg", preview[0], preview[1])
                elif what == "stream.mjpg":
                    self._stream(camera)
                elif what == "recent":
                    self.reply_json(view.recent(camera))
                else:
                    self.reply(404, "text/plain; charset=utf-8", b"not found\n")
            except KeyError:
                self.reply(404, "text/plain; charset=utf-8", b"no such camera\n")
            except EdgeUnreachable as exc:
                self.reply(502, "text/plain; charset=utf-8", f"{exc}\n".encode())

        def _stream(self, camera: str) -> None:
            """MJPEG of the camera's previews, a new part whenever the edge has a new one, checked at
            ``preview_fps``; ends when the client goes away, the edge stops answering, or after STREAM_MAX_S."""
            interval_s, last_seq = 1.0 / view.dep.ui.preview_fps, None
            first = view.preview(camera)  # raises before the headers go out when the camera is unknown
            self.send_response(200)
            self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command == "HEAD":
                return
            ends_s = time.monotonic() + STREAM_MAX_S
            preview = first
            try:
                while time.monotonic() < ends_s:
                    if preview is not None and preview[1].get("X-Frame-Seq") != last_seq:
                        last_seq = preview[1].get("X-Frame-Seq")
                        head = f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(preview[0])}\r\n\r\n"
                        self.wfile.write(head.encode() + preview[0] + b"\r\n")
                        self.wfile.flush()
                    time.sleep(interval_s)  # the rate cap: at most preview_fps parts per second
                    preview = view.preview(camera)
            except (EdgeUnreachable, BrokenPipeError, ConnectionResetError):
                return

    return ViewHandler


def serve_view(dep: Deployment, host: str | None = None, port: int | None = None) -> ThreadingHTTPServer:
    """Start the view for ``dep`` at ``host:port`` (default ``ui.bind:ui.port``) from a daemon thread.

    Raises:
        vcascade.core.telemetry.http.HttpPortInUse: the address cannot be bound.
    """
    host = dep.ui.bind if host is None else host
    server = serve_read_only(host, dep.ui.port if port is None else port, make_handler(DeploymentView(dep)), "ui")
    log.info("live view on http://%s:%d/ (token %s)", host, server.server_address[1],
             "required" if dep.ui.token else "not required")  # fmt: skip
    return server

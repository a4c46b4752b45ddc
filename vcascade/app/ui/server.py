"""The live view's HTTP server (``vcascade ui FILE``, or ``vcascade run`` with ``ui.enabled``): one read-only page
for the whole deployment, its scripts, and a small JSON API over :class:`~vcascade.app.ui.deployment_view.DeploymentView`.

===================================  ===================================================================
path                                 answer
===================================  ===================================================================
``/``                                the page (grid; ``#/camera/NAME`` shows one camera), no build step
``/static/<file>``                   its script and style sheet (package data of ``vcascade.app.ui``)
``/api/overview``                    JSON: cameras (state, reason, fps, ROIs/s, drops, e2e p50/p99 ms,
                                     ``no_preview_key`` when its edge serves no previews, ``removal``),
                                     brokers and workers (alive, credits, queue depth, stage times),
                                     components (ready / not ready / unreachable, why)
``/api/cameras/<name>/frame.jpg``    the camera's latest annotated preview (204 before the first one)
``/api/cameras/<name>/stream.mjpg``  MJPEG (``multipart/x-mixed-replace``) of its previews, at most
                                     ``ui.preview_fps`` per second
``/api/cameras/<name>/recent``       JSON: its recent result lines, events, per-hop latency breakdown
``/api/events``                      JSON: the recent events of every camera (the event feed)
``/api/history/...``                 the history's queries and evidence images
                                     (:mod:`vcascade.app.ui.history_api`; the history is the edge's, so
                                     an install without the ``edge`` extra answers 501 naming it)
===================================  ===================================================================

Read-only (:mod:`vcascade.core.telemetry.http`: GET and HEAD only, bounded and Host-checked), bound to ``ui.bind`` (127.0.0.1 unless
configured; any other address needs ``ui.token``, a config check). A request that presents the token as
``?token=`` gets it back as an HttpOnly, SameSite=Strict cookie, so the page's own requests carry it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from importlib import resources
from urllib.parse import unquote

from vcascade.app.ui.deployment_view import DeploymentView, EdgeUnreachable
from vcascade.core.config import Deployment
from vcascade.core.extras import EDGE, missing_extra
from vcascade.core.telemetry.http import TOKEN_COOKIE, Request, Response, json_response, serve_read_only, text
from vcascade.core.telemetry.http_server import BoundedHttpServer

log = logging.getLogger(__name__)

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".png": "image/png"}  # fmt: skip
"""Content types of the files in ``static/``; other files are not served."""
HISTORY_API = "vcascade.app.ui.history_api"
"""The history's queries read the edge's stores (PyAV, OpenCV and psycopg come with them): named here and imported
when the view starts, so a host without the ``edge`` extra still serves the live view."""
MJPEG_BOUNDARY = "vcascade-frame"
STREAM_MAX_S = 3600.0
"""An MJPEG stream ends after this long (the page reopens it), s: no connection is held forever."""
PAGE_CSP = "default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'"
"""The page loads only its own scripts, styles and images, and no other site may frame it."""


def static_file(name: str) -> bytes | None:
    """The bytes of ``static/<name>`` shipped in the package, or None for an unknown or unsafe name."""
    if "/" in name or name.startswith(".") or not any(name.endswith(ext) for ext in STATIC_TYPES):
        return None
    item = resources.files("vcascade.app.ui").joinpath("static", name)
    return item.read_bytes() if item.is_file() else None


def make_route(view: DeploymentView, model_dir: str | None = None) -> Callable[[Request], Response]:
    """The function answering the requests of ``view`` (the token gate runs before it); ``model_dir``: the folder
    searched first for the embedding recognizer's model of like-queries (``--model-dir``)."""
    token = view.dep.ui.token
    history = _history_answer(view.dep, model_dir)

    def route(request: Request) -> Response:
        path = request.path
        if path == "/":
            return _static("index.html", request.query)
        if path.startswith("/static/"):
            return _static(path[len("/static/"):], request.query)
        if path == "/api/overview":
            return json_response(view.overview())
        if path == "/api/events":
            return json_response(view.events())
        if path.startswith("/api/history/"):
            return history(request)
        if path.startswith("/api/cameras/"):
            camera, _, what = unquote(path[len("/api/cameras/"):]).partition("/")
            return _camera(camera, what)
        return text(404, "not found")

    def _static(name: str, query: dict[str, list[str]]) -> Response:
        body = static_file(name)
        if body is None:
            return text(404, "not found")
        headers = {"Content-Security-Policy": PAGE_CSP}
        if query.get("token") and token:  # keep the token for the page's own requests
            headers["Set-Cookie"] = f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        return Response(200, STATIC_TYPES[name[name.rindex("."):]], body, headers)

    def _camera(camera: str, what: str) -> Response:
        try:
            if what == "frame.jpg":
                preview = view.preview(camera)
                return Response(204, "image/jpeg") if preview is None else Response(200, "image/jpeg", preview[0], preview[1])
            if what == "stream.mjpg":
                return _stream(camera)
            if what == "recent":
                return json_response(view.recent(camera))
            return text(404, "not found")
        except KeyError:
            return text(404, "no such camera")
        except EdgeUnreachable as exc:
            return text(502, str(exc))

    def _stream(camera: str) -> Response:
        """MJPEG of the camera's previews, a new part whenever the edge has a new one, checked at
        ``preview_fps``; ends when the client goes away, the edge stops answering, or after STREAM_MAX_S."""
        last_seq: list[str | None] = [None]
        pending = [view.preview(camera)]  # raises before the headers go out when the camera is unknown

        def next_part() -> bytes | None:
            try:
                preview = pending.pop() if pending else view.preview(camera)
            except EdgeUnreachable:
                return None
            if preview is None or preview[1].get("X-Frame-Seq") == last_seq[0]:
                return b""
            last_seq[0] = preview[1].get("X-Frame-Seq")
            head = f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(preview[0])}\r\n\r\n"
            return head.encode() + preview[0] + b"\r\n"

        return Response(200, f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}", stream=next_part,
                        stream_interval_s=1.0 / view.dep.ui.preview_fps, stream_max_s=STREAM_MAX_S)  # fmt: skip

    return route


def _history_answer(dep: Deployment, model_dir: str | None) -> Callable[[Request], Response]:
    """What answers ``/api/history/...``: the history API, or, in an install without the ``edge`` extra, a 501
    naming the extra to install (logged once here)."""
    try:
        api = importlib.import_module(HISTORY_API).HistoryApi(dep, model_dir)
    except ModuleNotFoundError as exc:
        line = missing_extra(exc, "ui", EDGE)
        if line is None:
            raise
        log.warning("%s (the history pages answer 501 until then)", line)
        return lambda request: text(501, line)
    return api.answer


def serve_view(
    dep: Deployment, host: str | None = None, port: int | None = None, model_dir: str | None = None
) -> BoundedHttpServer:
    """Start the view for ``dep`` at ``host:port`` (default ``ui.bind:ui.port``) from a daemon thread. ``Host``
    may name loopback, the bind address or one of ``ui.allowed_hosts`` (421 otherwise). ``model_dir``: the folder
    searched first for the model of like-queries (``--model-dir``; then ``$VCASCADE_MODEL_DIR``, the user cache).

    Raises:
        vcascade.core.telemetry.http.HttpPortInUse: the address cannot be bound.
    """
    host = dep.ui.bind if host is None else host
    route = make_route(DeploymentView(dep), model_dir)
    server = serve_read_only(host, dep.ui.port if port is None else port, route, "ui", token=dep.ui.token,
                             allowed_hosts=dep.ui.allowed_hosts)  # fmt: skip
    log.info("live view on http://%s:%d/ (token %s)", host, server.server_address[1],
             "required" if dep.ui.token else "not required")  # fmt: skip
    return server

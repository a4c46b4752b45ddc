"""The edge's control socket: add, remove and list cameras while the edge runs (``vcascade camera``).

Protocol (ZeroMQ REQ client -> ROUTER on ``edges.<name>.control_port``): one request, one reply, each a
msgpack map decoded by msgspec into a typed struct. A request's ``op`` is ``camera_add`` (``name`` and the
camera's settings, validated with the same pydantic :class:`~vcascade.core.config.CameraConfig` as the deployment
file), ``camera_remove`` (``name``) or ``camera_list``. The reply says ``ok``, an ``error`` when not, and the
edge's cameras (state, removal, books; URLs redacted).

Security is the broker links': with ``security.curve.enabled`` the socket is a CurveZMQ server holding the
edge's keypair, and the process's ZAP handler admits only the public keys of ``authorized_dir`` (by default
every ``*.key`` of ``keys_dir``) named after the edge itself or after no component of the deployment (operator
keys; :mod:`vcascade.core.transport.zap`): another edge's, a broker's or a worker's key is refused. A refused handshake
never reaches this code and is counted in ``vcascade_edge_auth_failures_total``; a client libzmq cuts for a
request over the message size limit never does either, and is counted in
``vcascade_edge_disconnects_total{socket="control"}`` (:mod:`vcascade.core.transport.disconnects`). Without CurveZMQ the socket
must bind a loopback address (config check).

Threads: :class:`ControlServer` owns the socket and decodes requests; each change is handed to the detector
thread through :meth:`ControlServer.apply_pending` (called by the edge's loop between frames), so cameras are
only ever changed there (:class:`vcascade.edge.camera_set.CameraSet`). Malformed requests (anything
:func:`vcascade.core.protocol.control.decode_request` refuses: too large, too deep, not msgpack, bad fields) are
counted (``vcascade_edge_control_requests_total{op="unknown", outcome="malformed"}``) and answered with an error,
never raised; a request of another protocol version is refused the same way, counted with outcome ``version``,
and its reply names the version this edge speaks.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import zmq
from pydantic import TypeAdapter, ValidationError

from vcascade.core.protocol.bounded_decode import MalformedMessage
from vcascade.core.config import CameraConfig, Name
from vcascade.core.protocol.control import (  # noqa: F401  (re-exported: the protocol is part of this module's API)
    PROTOCOL_VERSION,
    CameraAdd,
    CameraList,
    CameraRemove,
    Reply,
    decode_reply,
    decode_request,
    encode,
)
from vcascade.core.transport.disconnects import watch_connections
from vcascade.core.redact import redact_url
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.transport.security import secure_server
from vcascade.core.transport.sockets import make_socket
from vcascade.core.transport.zap import OPERATORS, start_authenticator
from vcascade.edge.camera_set import CameraChangeError, CameraSet
from vcascade.edge.metrics import EdgeTelemetry

log = logging.getLogger(__name__)

POLL_MS = 100
"""Longest the control thread sleeps between checks of its stop flag, ms."""
APPLY_TIMEOUT_S = 10.0
"""How long a request waits for the edge's loop thread to apply it before the reply says so, s."""


def camera_config(edge: str, name: str, settings: dict[str, Any]) -> CameraConfig:
    """Validate a camera added at run time with the deployment file's model; ``edge`` defaults to this edge.

    Raises:
        CameraChangeError: a bad name, a bad setting (key path and pydantic's reason), or another edge.
    """
    try:
        TypeAdapter(Name).validate_python(name)
    except ValidationError:
        raise CameraChangeError(f"camera name {name!r}: expected letters, digits, '_', '.', '-'") from None
    if settings.get("edge", edge) != edge:
        raise CameraChangeError(f"camera {name}: edge = {settings['edge']!r}, but this is edge {edge!r}")
    try:
        return CameraConfig.model_validate({**settings, "edge": edge})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
        raise CameraChangeError(f"camera {name}: {redact_url(problems)}") from None


def describe(cameras: CameraSet) -> dict[str, dict[str, Any]]:
    """Per camera: state, the ``reason`` of its last state change (a fixed word, e.g. ``connection_refused``), its
    ``fault`` and ``detail`` (the latest fault since it last streamed and its text, credentials redacted; None
    after), the error that failed it (None unless failed or ended early), removal (None, ``removing``,
    ``closed``), frames, sent, results, drops, redacted URL."""
    tallies = cameras.link.tally_copy()
    out = {}
    for reader in cameras.readers():
        tally = tallies.get(reader.camera)
        out[reader.camera] = {
            "state": reader.state, "reason": reader.reason, "fault": reader.fault, "detail": reader.detail,
            "error": reader.error,
            "removal": reader.removal, "frames": reader.frames,
            "sent": tally.sent if tally else 0, "results": tally.results if tally else 0,
            "drops": dict(tally.drops) if tally else {}, "url": redact_url(reader.cfg.url),
        }
    return out


class ControlServer(threading.Thread):
    """The control socket of one edge (a daemon thread) and the queue of changes for the edge's loop thread.

    Args:
        settings: the edge's settings (its ``control_port``, ``bind``/``host``, ``security``, the file's component
            names).
        ctx: the process's ZeroMQ context.
        cameras: the edge's camera set, changed only by :meth:`apply_pending`.

    Raises:
        vcascade.core.transport.security.SecurityError: CurveZMQ is on and the edge's keys or the authorized keys are missing.
        zmq.ZMQError: the control port cannot be bound.
    """

    def __init__(self, settings: EdgeSettings, ctx: zmq.Context, cameras: CameraSet) -> None:
        super().__init__(name="edge-control", daemon=True)
        edge = settings.name
        self.edge, self.cameras = edge, cameras
        self.telemetry = EdgeTelemetry(edge)
        self._pending: queue.Queue[tuple[CameraAdd | CameraRemove | CameraList, Future]] = queue.Queue()
        self._stop_event = threading.Event()
        self._auth = start_authenticator(ctx, settings.security)
        self._sock = make_socket(ctx, zmq.ROUTER)
        secure_server(self._sock, settings.security, edge)
        refusals = None
        if self._auth is not None:  # CurveZMQ: the edge itself and the operators, no other component
            gate = self._auth.admit(self._sock, OPERATORS, [edge], components=settings.component_names)
            refusals = gate.refusal_reason
        watch_connections(self._sock, "edge", edge, "control", curve=self._auth is not None, refusals=refusals)
        endpoint = settings.edge.control_endpoint(bind=True)
        self._sock.bind(endpoint)
        log.info("edge %s: control socket on %s", edge, endpoint)

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                if self._sock.poll(POLL_MS):
                    self._serve_one(self._sock.recv_multipart())
        finally:
            self._sock.close()

    def close(self) -> None:
        """Stop the thread, close the socket, stop the ZAP handler (after the socket is closed)."""
        self._stop_event.set()
        self.join(timeout=2.0)
        if self._auth is not None:
            self._auth.stop()

    def _serve_one(self, frames: list[bytes]) -> None:
        if len(frames) != 3 or frames[1] != b"":  # [peer, delimiter, body]: what a REQ client sends
            self.telemetry.control_request("unknown", "malformed")
            return  # not a REQ client: nothing sensible to answer
        try:
            request = decode_request(frames[2])
        except MalformedMessage as exc:
            self._refuse(frames[0], exc)
            return
        op = type(request).__struct_config__.tag
        done: Future = Future()
        self._pending.put((request, done))
        try:
            reply = done.result(timeout=APPLY_TIMEOUT_S)
        except FutureTimeout:
            reply = Reply(ok=False, error=f"edge {self.edge}: no answer from its loop thread within "
                          f"{APPLY_TIMEOUT_S:.0f} s; the change may still be applied (see `vcascade camera list`)")
            self.telemetry.control_request(op, "timeout")
        else:
            self.telemetry.control_request(op, "ok" if reply.ok else "refused")
        self._reply(frames[0], reply)

    def _refuse(self, peer: bytes, exc: MalformedMessage) -> None:
        """Count and answer a request that did not decode (outcome ``version`` or ``malformed``)."""
        if exc.reason == "version":
            self.telemetry.control_request("unknown", "version")
            error = f"unsupported control protocol version ({exc}): edge {self.edge} speaks v={PROTOCOL_VERSION}"
        else:
            self.telemetry.control_request("unknown", "malformed")
            error = f"malformed request: {str(exc)[:200]}"
        self._reply(peer, Reply(ok=False, error=error))

    def _reply(self, peer: bytes, reply: Reply) -> None:
        try:
            self._sock.send_multipart([peer, b"", encode(reply)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the client went away (EHOSTUNREACH) or is not reading
            log.warning("edge %s: control reply not sent: %s", self.edge, exc.strerror)

    def apply_pending(self) -> None:
        """Apply queued requests, then advance removals (the edge's loop thread only)."""
        while True:
            try:
                request, done = self._pending.get_nowait()
            except queue.Empty:
                break
            if done.set_running_or_notify_cancel():
                done.set_result(self._apply(request))
        self.cameras.settle()

    def _apply(self, request: CameraAdd | CameraRemove | CameraList) -> Reply:
        try:
            if isinstance(request, CameraAdd):
                self.cameras.add(request.name, camera_config(self.edge, request.name, request.camera))
            elif isinstance(request, CameraRemove):
                self.cameras.remove(request.name)
        except CameraChangeError as exc:
            return Reply(ok=False, error=str(exc), cameras=describe(self.cameras))
        return Reply(ok=True, cameras=describe(self.cameras))


def start_control(settings: EdgeSettings, ctx: zmq.Context, cameras: CameraSet) -> ControlServer | None:
    """Start the control socket thread when ``edges.<edge>.control_port`` is set; None otherwise.

    Raises:
        vcascade.core.transport.security.SecurityError, zmq.ZMQError: see :class:`ControlServer`.
    """
    if settings.edge.control_port is None:
        return None
    server = ControlServer(settings, ctx, cameras)
    server.start()
    return server

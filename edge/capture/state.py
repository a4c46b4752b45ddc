"""The per-camera state machine: where a camera is, why it got there, exported as metrics and logged once.

States::

    connecting  --opened-->            streaming
    connecting  --FAULT-->              backing_off     (live)   |  failed (file)
    streaming   --read_timeout / stream_ended / FAULT-->  stalled   (live: no frames)
    stalled     --reconnect-->          backing_off
    backing_off --retry-->              connecting
    streaming   --end_of_file / max_frames / stopped-->  ended
    streaming   --truncated_file / FAULT-->  failed   (files)
    any         --error-->              failed

FAULT is the real cause, one of :data:`vcascade.edge.capture.faults.FAULT_REASONS` (``connection_refused``,
``unauthorized``, ``not_found``, ``missing_file``...). A live source never ends on its own: the end of its stream is a
stall and the camera reconnects.

Logging: each change is logged once; a change to ``failed`` at ERROR, to any other state for a fault at WARNING,
and so is the first ``streaming`` after a fault (the recovery); the rest at INFO. Repeats of the same change of the same camera (a reconnect loop against a dead camera) are
rate-limited per camera (:class:`vcascade.core.telemetry.logs.RateLimitFilter` with ``rate_key``), so one camera's lines never
hide another's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

from vcascade.core.redact import redact_url
from vcascade.edge.capture.faults import FAULT_REASONS
from vcascade.edge.metrics import CameraTelemetry

log = logging.getLogger(__name__)

CameraState = Literal["connecting", "streaming", "stalled", "backing_off", "ended", "failed"]
STATES: tuple[str, ...] = get_args(CameraState)
FINAL_STATES = ("ended", "failed")


@dataclass(frozen=True)
class Transition:
    """One state change.

    Attributes:
        at_s: ``time.perf_counter()`` when it happened.
        source: the state left.
        target: the state entered.
        reason: short fixed word (metric label), e.g. ``read_timeout``.
        detail: human text for the log (credentials in URLs redacted).
        wall_ts_ms: Unix epoch time of the change, ms (for records leaving the host).
    """

    at_s: float
    source: str
    target: str
    reason: str
    detail: str
    wall_ts_ms: float = field(default_factory=lambda: time.time() * 1000.0)


StateListener = Callable[[str, Transition], None]
"""Called with (camera, transition) on the camera's supervisor thread after each state change."""
_LISTENERS: dict[str, list[StateListener]] = {}
_LISTENERS_LOCK = threading.Lock()


def listen_states(edge: str, listener: StateListener) -> Callable[[], None]:
    """Call ``listener`` on every state change of every camera of edge ``edge`` (several edges may share a process:
    tests); returns the function that removes it. A listener must be quick and must not raise (an error is logged
    and the camera goes on)."""
    with _LISTENERS_LOCK:
        _LISTENERS.setdefault(edge, []).append(listener)

    def remove() -> None:
        with _LISTENERS_LOCK:
            if listener in _LISTENERS.get(edge, []):
                _LISTENERS[edge].remove(listener)

    return remove


class CameraStateMachine:
    """Current state of one camera, its history of transitions, and the metrics that show them.

    Metrics (through ``telemetry``): ``vcascade_edge_camera_state{edge,camera,state,reason}`` is 1 for the current
    state and 0 for the others (the Prometheus "state set" pattern), ``reason`` why each state was last entered;
    ``vcascade_edge_camera_transitions_total{edge,camera,state,reason}`` counts entries into each state by
    reason; ``vcascade_edge_camera_up`` is 1 while streaming.

    Thread-safe: the camera's supervisor thread changes it, any thread reads it.

    Args:
        telemetry: the camera's telemetry (edge and camera names).
        history_max: transitions kept at most.
    """

    def __init__(self, telemetry: CameraTelemetry, history_max: int = 1000) -> None:
        self.telemetry, self.camera = telemetry, telemetry.camera
        self.state: str = "connecting"
        self.reason = "start"
        self.transitions: list[Transition] = []
        self._history_max = history_max
        self._faulted = False
        self._lock = threading.Lock()
        self._publish()

    def to(self, target: str, reason: str, detail: str = "") -> bool:
        """Enter ``target`` because of ``reason``; logs and counts it once. Returns False if already there.

        Raises:
            ValueError: ``target`` is not one of :data:`STATES`.
        """
        if target not in STATES:
            raise ValueError(f"unknown camera state {target!r}; expected one of {STATES}")
        with self._lock:
            if target == self.state and reason == self.reason:
                return False
            step = Transition(time.perf_counter(), self.state, target, reason, redact_url(detail))
            self.state, self.reason = target, reason
            self.transitions.append(step)
            del self.transitions[: -self._history_max]
        self.telemetry.entered(target, reason)
        self._publish()
        level = self._level(target, reason)
        log.log(level, "camera %s: %s -> %s (%s)%s", self.camera, step.source, target, reason,
                f": {step.detail}" if step.detail else "", extra={"rate_key": f"{self.camera}\0{target}\0{reason}"})
        self._tell_listeners(step)
        return True

    def _level(self, target: str, reason: str) -> int:
        """ERROR to ``failed``; WARNING for a fault, and for streaming again after one (the recovery); else INFO."""
        if target == "failed":
            return logging.ERROR
        if reason in FAULT_REASONS:
            self._faulted = True
            return logging.WARNING
        if target == "streaming" and self._faulted:
            self._faulted = False
            return logging.WARNING
        return logging.INFO

    def _tell_listeners(self, step: Transition) -> None:
        with _LISTENERS_LOCK:
            listeners = tuple(_LISTENERS.get(self.telemetry.edge, ()))
        for listener in listeners:
            try:
                listener(self.camera, step)
            except Exception:  # a listener's bug must not stop the camera
                log.exception("camera %s: state listener failed", self.camera)

    def history(self) -> list[Transition]:
        """A copy of the transitions so far (oldest first, at most ``history_max``)."""
        with self._lock:
            return list(self.transitions)

    def _publish(self) -> None:
        self.telemetry.show_state(self.state, STATES, self.reason)

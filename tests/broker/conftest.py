"""A real broker in a thread, and real DEALER sockets playing edges and workers."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
import zmq
from prometheus_client import REGISTRY

from vcascade.broker import run_broker
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment
from vcascade.core.schema import BrokerSettings
from vcascade.core.transport.sockets import make_socket
from tests.waiting import until

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
_names = itertools.count()


@dataclass
class BrokerHandle:
    name: str
    deployment: Deployment
    stop: threading.Event
    thread: threading.Thread
    reports: list[dict] = field(default_factory=list)
    sockets: list[zmq.Socket] = field(default_factory=list)

    @property
    def cfg(self):
        return self.deployment.brokers[self.name]

    def edge(self, ident: str) -> zmq.Socket:
        return self._dealer(ident, "frontend")

    def worker(self, ident: str, credits: int | None = None) -> zmq.Socket:
        sock = self._dealer(ident, "backend")
        if credits is not None:
            sock.send(wire.encode(wire.Ready(worker=ident, credits=credits, recognizer="embed")))
        return sock

    def _dealer(self, ident: str, side: str) -> zmq.Socket:
        sock = make_socket(zmq.Context.instance(), zmq.DEALER, identity=ident)
        sock.connect(self.cfg.endpoint(side))
        self.sockets.append(sock)
        return sock

    def sample(self, metric: str, **labels: str) -> float:
        """Current value of a broker metric sample of this broker (0.0 when never set)."""
        return REGISTRY.get_sample_value(metric, {"broker": self.name, **labels}) or 0.0

    def counted(self, metric: str, expected: float, timeout_s: float = 10.0, **labels: str) -> float:
        """The sample once it reads ``expected``, or what it reads after ``timeout_s``: the broker publishes its
        per-ROI counters at its housekeeping tick (``POLL_MS``), so a count shows up to one tick after the event."""
        until(lambda: self.sample(metric, **labels) == expected, timeout_s)
        return self.sample(metric, **labels)

    def shut(self, timeout_s: float = 10.0) -> None:
        self.stop.set()
        self.thread.join(timeout_s)


def make_deployment(
    name: str, ports: list[int], queue_max: int, max_attempts: int = 2, heartbeat_s: float = 1.0, **broker
) -> Deployment:
    """The demo deployment with one broker ``name`` on the given (frontend, backend, metrics) ports."""
    return Deployment.model_validate(deployment_data(name, ports, queue_max, max_attempts, heartbeat_s, **broker))


def deployment_data(
    name: str, ports: list[int], queue_max: int, max_attempts: int = 2, heartbeat_s: float = 1.0, **broker
) -> dict:
    """The raw deployment of :func:`make_deployment`; ``broker``: more fields of the broker's section."""
    raw = yaml.safe_load(DEMO.read_text())
    raw["brokers"] = {
        name: {
            "host": "127.0.0.1", "frontend_port": ports[0], "backend_port": ports[1],
            "metrics_port": ports[2], "queue_max": queue_max, "max_attempts": max_attempts, **broker,
        }
    }  # fmt: skip
    raw["heartbeat"] = {"interval_s": heartbeat_s, "liveness": 3}
    for section in ("edges", "workers"):
        for component in raw[section].values():
            component["brokers"] = [name]
    return raw


@pytest.fixture
def start_broker(free_port):
    """``start_broker(queue_max=..., max_attempts=..., heartbeat_s=..., config={broker fields},
    worker_timeout_s=..., drain_timeout_s=...) -> BrokerHandle``; stopped after."""
    handles: list[BrokerHandle] = []

    def start(
        queue_max: int = 1000, max_attempts: int = 2, heartbeat_s: float = 1.0, config: dict | None = None, **kwargs
    ) -> BrokerHandle:
        name = f"broker-t{next(_names)}"
        ports = [free_port(), free_port(), free_port()]
        deployment = make_deployment(name, ports, queue_max, max_attempts, heartbeat_s, **(config or {}))
        stop = threading.Event()
        reports: list[dict] = []
        settings = BrokerSettings.from_deployment(deployment, name)
        thread = threading.Thread(
            target=run_broker, args=(settings, stop, reports.append), kwargs=kwargs, daemon=True
        )
        handle = BrokerHandle(name, deployment, stop, thread, reports)
        thread.start()
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.shut()
        for sock in handle.sockets:
            sock.close(linger=0)
        assert not handle.thread.is_alive(), f"{handle.name} did not stop"

"""The broker: per-(recognizer, camera) ROI queues and credit-based load balancing between edges and workers.

* :mod:`broker.dispatch` — the pure policy (:class:`Dispatcher`), no sockets, no clock.
* :mod:`broker.queues` — the per-(recognizer, camera) FIFO queues in round-robin order (:class:`RoiQueues`).
* :mod:`broker.server` — the ZeroMQ ROUTER/ROUTER loop (:func:`run_broker`); :mod:`broker.bind` its sockets.
* :mod:`broker.peers` — the bounded table of recently heard edges (heartbeat targets).
* :mod:`broker.books` — what is kept per ROI and counted per run; deadline and hop arithmetic.
* :mod:`broker.metrics` — ``vcascade_broker_*`` Prometheus metrics.
"""

from broker.dispatch import Dispatcher, InFlight, Pending, RecognizerChanged, WorkerLimit
from broker.queues import RoiQueues
from broker.server import DRAIN_TIMEOUT_S, WORKER_TIMEOUT_S, run_broker

__all__ = [
    "DRAIN_TIMEOUT_S",
    "Dispatcher",
    "InFlight",
    "Pending",
    "RecognizerChanged",
    "RoiQueues",
    "WORKER_TIMEOUT_S",
    "WorkerLimit",
    "run_broker",
]

"""The broker: per-(recognizer, camera) ROI queues and credit-based load balancing between edges and workers.

* :mod:`vcascade.broker.dispatch` — the pure policy (:class:`Dispatcher`), no sockets, no clock.
* :mod:`vcascade.broker.queues` — the per-(recognizer, camera) FIFO queues in round-robin order (:class:`RoiQueues`).
* :mod:`vcascade.broker.bounds` — queue bounds in ROIs and bytes (:class:`ByteBounds`); who pays above one.
* :mod:`vcascade.broker.records` — what the policy keeps per ROI: :class:`Pending`, :class:`InFlight`.
* :mod:`vcascade.broker.workers` — what it keeps per worker (answers, overdue ROIs); the least useful one.
* :mod:`vcascade.broker.server` — the ZeroMQ ROUTER/ROUTER loop (:func:`run_broker`); :mod:`vcascade.broker.bind` its sockets.
* :mod:`vcascade.broker.books` — what is kept per ROI and counted per run; deadline and hop arithmetic.
* :mod:`vcascade.broker.metrics` — ``vcascade_broker_*`` metrics; :class:`BrokerTelemetry` counts into them.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "ByteBounds": ".bounds",
    "Dispatcher": ".dispatch",
    "InFlight": ".records",
    "Pending": ".records",
    "RecognizerChanged": ".workers",
    "WorkerLimit": ".workers",
    "BrokerTelemetry": ".metrics",
    "RoiQueues": ".queues",
    "DRAIN_TIMEOUT_S": ".server",
    "WORKER_TIMEOUT_S": ".dispatch",
    "run_broker": ".server",
})

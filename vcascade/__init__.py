"""vcascade: live video analytics across many cameras (edge detection, ZeroMQ brokers, pipeline-parallel center).

One import root, in layers that only point down (docs/DESIGN.md, "Layout"):

* :mod:`vcascade.core` — wire protocol, config schema, detections, telemetry, sockets, security, threads;
* :mod:`vcascade.edge`, :mod:`vcascade.broker`, :mod:`vcascade.center` — the three components (the
  repository's ``edge/``, ``broker/`` and ``center/`` folders); they import the core, never each other;
* :mod:`vcascade.app` — the ``vcascade`` command, the launcher, status, plan and camera control.

Importing this package loads nothing else.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]

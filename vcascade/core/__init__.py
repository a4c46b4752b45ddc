"""The core every component stands on: wire protocol, config schema, detections, telemetry, sockets and
security, threads, model files. It imports nothing from :mod:`vcascade.edge`, :mod:`vcascade.broker`,
:mod:`vcascade.center` or :mod:`vcascade.app`.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "ConfigError": ".config", "Deployment": ".config", "load_config": ".config",
    "Detections": ".detections",
    "PROTOCOL_VERSION": ".protocol.wire", "MalformedMessage": ".protocol.wire",
})

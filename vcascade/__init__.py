"""vcascade: live video analytics across many cameras (edge detection, ZeroMQ brokers, pipeline-parallel center).

This shared package holds the wire protocol (:mod:`vcascade.wire`), the configuration schema
(:mod:`vcascade.config`), telemetry, model fetch, the launcher and the ``vcascade`` command.
"""

from vcascade.config import ConfigError, Deployment, load_config
from vcascade.detections import Detections
from vcascade.wire import PROTOCOL_VERSION, MalformedMessage

__version__ = "0.1.0"
__all__ = ["PROTOCOL_VERSION", "ConfigError", "Deployment", "Detections", "MalformedMessage", "load_config"]

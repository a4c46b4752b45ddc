"""The one pattern of component names (cameras, edges, brokers, workers, recognizers, stage groups).

Config keys follow it (:mod:`vcascade.core.schema.base`), and so does every name a peer puts on the wire
(:mod:`vcascade.core.protocol.wire`): a name becomes a metric label value and a value in result lines, so what a peer
may send there is bounded like what a config file may hold. Kept apart so that the wire protocol does not
import the config schema (pydantic).
"""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""A name: a letter or digit, then letters, digits, ``_``, ``.``, ``-``; 63 characters at most."""

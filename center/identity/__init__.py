"""Identity space of an embedding recognizer: vector indexes over gallery vectors (see docs/DESIGN.md)."""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "AnnIndex": ".index",
    "ExactIndex": ".index",
    "make_index": ".index",
})

"""The identity space of an embedding recognizer, shared by all its workers on any number of hosts.

Each worker matches against its local copy (:class:`IdentitySpace`, a vector index) and a background thread
(:class:`StoreSync`) exchanges news with the store (:data:`STORES`: ``sqlite`` embedded, ``redis`` shared), which
allocates ids (never reused) and keeps identities across restarts. See docs/IDENTITY.md.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "STORES": ".backends",
    "build_store": ".backends",
    "state_path": ".backends",
    "IdentityHead": ".head",
    "AnnIndex": ".index",
    "ExactIndex": ".index",
    "make_index": ".index",
    "IdentityTelemetry": ".metrics",
    "RedisStore": ".redis_store",
    "IdentitySpace": ".space",
    "MatchStats": ".space",
    "SqliteStore": ".sqlite_store",
    "IdentityStore": ".store",
    "Sighting": ".store",
    "StoredIdentity": ".store",
    "StoreWrite": ".store",
    "StoreSync": ".sync",
    "Topology": ".topology",
})

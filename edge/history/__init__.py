"""The history at the edge (docs/HISTORY.md): results, events and camera states kept with their evidence images
for ``vcascade search``, bounded and counted.

:mod:`~vcascade.edge.history.records` (way-back events to records) -> :mod:`~vcascade.edge.history.writer` (its
own thread, a bounded queue, counted drops) -> :mod:`~vcascade.edge.history.evidence` (JPEG files) and a store
(:mod:`~vcascade.edge.history.sqlite_store`); :mod:`~vcascade.edge.history.retention` evicts the oldest rows;
:mod:`~vcascade.edge.history.query` is what ``vcascade search`` asks.
"""

from vcascade.core.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "EventFrame": ".event_frame",
    "HistoryQuery": ".query",
    "QueryError": ".query",
    "SqliteHistory": ".sqlite_store",
    "StoreDown": ".store",
    "StoreFull": ".store",
    "HistoryWriter": ".writer",
    "open_history": ".writer",
})

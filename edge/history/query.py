"""A question to the history store (:class:`HistoryQuery`), read from the words a person types (``--since 1h``,
``--from 2026-12-03T08:00``), and the SQL that answers it, shared by every store (no I/O here).

A query for an identity follows its merges (docs/HISTORY.md): the store first collects every id merged into it
(:data:`MAX_MERGE_HOPS` deep; provisional ids count with the worker that issued them), then selects the rows of all
of them. Rows are the newest ``limit`` that match, returned oldest first (a timeline).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from vcascade.edge.analytics.counting import EVENT_TYPES

MAX_MERGE_HOPS = 64
"""Longest chain of merges followed from the identity asked for."""

MAX_LIMIT = 100_000
"""Most rows one query returns."""

DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
"""Units of a ``--since`` duration."""

COLUMNS = (
    "kind", "ref", "edge", "camera", "capture_unix_ms", "stream_ts_ms", "track_id", "class_name", "identity",
    "worker", "text", "label", "event_type", "place", "direction", "dwell_s", "crop_path", "frame_path", "bytes",
)
"""Columns of a sighting row, in the order queries return them."""


class QueryError(ValueError):
    """A query that cannot be asked: the message names the word at fault (``--since '1x': ...``)."""


@dataclass(frozen=True)
class HistoryQuery:
    """What to find. Every given filter must hold (AND); None: any.

    Attributes:
        identity: rows of this identity and of every id merged into it.
        cameras: rows of these cameras (empty: any).
        class_name: the detector's class.
        event_type: only events of this type (one of :data:`~vcascade.edge.analytics.counting.EVENT_TYPES`).
        place: only events of this line or zone.
        events_only: only events (``--event``, ``--line``, ``--zone``).
        text: the text read contains this (case-insensitive).
        from_ms, to_ms: capture time window, ms since the Unix epoch (``to_ms`` excluded).
        limit: the newest ``limit`` rows (1..:data:`MAX_LIMIT`).
        ref: only the row of this result or event id (the live view's evidence images are asked for by it).

    Raises:
        QueryError: an identity outside a signed 64-bit integer (the stores' column), an unknown event type, a
            ``limit`` out of range, ``to_ms`` not after ``from_ms``.
    """

    identity: int | None = None
    cameras: tuple[str, ...] = ()
    class_name: str | None = None
    event_type: str | None = None
    place: str | None = None
    events_only: bool = False
    text: str | None = None
    from_ms: float | None = None
    to_ms: float | None = None
    limit: int = 100
    ref: str | None = None

    def __post_init__(self) -> None:
        if self.identity is not None and not -(2**63) <= self.identity < 2**63:  # the stores' INTEGER / BIGINT
            raise QueryError(f"--identity {self.identity}: expected an id within a signed 64-bit integer")
        if self.event_type is not None and self.event_type not in EVENT_TYPES:
            raise QueryError(f"--event {self.event_type!r}: expected one of {', '.join(EVENT_TYPES)}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise QueryError(f"--limit {self.limit}: expected 1..{MAX_LIMIT}")
        if self.from_ms is not None and self.to_ms is not None and self.to_ms <= self.from_ms:
            raise QueryError("--to is not after --from")


def parse_duration_s(text: str, word: str = "--since") -> float:
    """Seconds in ``text``: a number and a unit of :data:`DURATION_UNITS_S` (``90s``, ``15m``, ``1h``, ``2d``).

    Raises:
        QueryError: not such a duration, or not positive.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None or float(match[1]) <= 0:
        raise QueryError(f"{word} {text!r}: expected a positive number and a unit (s, m, h, d, w), e.g. 1h")
    return float(match[1]) * DURATION_UNITS_S[match[2]]


def parse_time_ms(text: str, word: str) -> float:
    """ms since the Unix epoch of an ISO 8601 time (``2026-12-03T08:00``, ``2026-12-03 08:00:00+01:00``; no zone:
    UTC) or of a plain number of seconds since the epoch.

    Raises:
        QueryError: neither.
    """
    try:
        return float(text) * 1000.0
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise QueryError(f"{word} {text!r}: expected an ISO 8601 time (2026-12-03T08:00, UTC unless a zone is "
                         "given) or seconds since the Unix epoch") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp() * 1000.0


@dataclass
class Sql:
    """A statement and its parameters, written with ``?`` placeholders (:meth:`with_style` for other drivers)."""

    text: str
    params: list = field(default_factory=list)

    def with_style(self, placeholder: str) -> str:
        """The statement with each ``?`` replaced by ``placeholder`` (``%s`` for psycopg)."""
        return self.text.replace("?", placeholder)


def sightings_sql(query: HistoryQuery, identities: list[tuple[int, str]] | None) -> Sql:
    """The SELECT answering ``query`` over the ``sightings`` table, newest first (the caller reverses it).

    Args:
        query: the question.
        identities: (id, worker) pairs the identity stands for (its merges followed; ``worker`` ``''`` for store
            ids, the issuing worker for provisional ones); None when the query names no identity.
    """
    where: list[str] = []
    params: list = []
    if identities is not None:
        store_ids = sorted({i for i, w in identities if not w})
        local = sorted({(i, w) for i, w in identities if w})
        parts = [f"identity IN ({', '.join('?' * len(store_ids))})"] if store_ids else []
        params += store_ids
        for ident, worker in local:
            parts.append("(identity = ? AND worker = ?)")
            params += [ident, worker]
        where.append("(" + " OR ".join(parts or ["0 = 1"]) + ")")
    if query.cameras:
        where.append(f"camera IN ({', '.join('?' * len(query.cameras))})")
        params += list(query.cameras)
    filters = (("ref", query.ref), ("class_name", query.class_name), ("event_type", query.event_type),
               ("place", query.place))
    for column, value in filters:
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if query.events_only:
        where.append("kind = 'event'")
    if query.text is not None:
        where.append("LOWER(text) LIKE ? ESCAPE '\\'")
        params.append("%" + _escape_like(query.text.lower()) + "%")
    if query.from_ms is not None:
        where.append("capture_unix_ms >= ?")
        params.append(query.from_ms)
    if query.to_ms is not None:
        where.append("capture_unix_ms < ?")
        params.append(query.to_ms)
    text = f"SELECT {', '.join(COLUMNS)} FROM sightings"
    if where:
        text += " WHERE " + " AND ".join(where)
    text += " ORDER BY capture_unix_ms DESC, id DESC LIMIT ?"
    return Sql(text, params + [query.limit])


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

"""A history question as the words a person gives it, and the one place that reads them into a
:class:`~vcascade.edge.history.query.HistoryQuery`: ``vcascade search``'s options and the live view's
``/api/history/search`` parameters (docs/HISTORY.md) both come here, so both accept and refuse the same queries.

Messages name the option as the CLI spells it (``--since '1x': ...``); :func:`for_http` respells them with the
HTTP parameter names (``since '1x': ...``), which are the options without their dashes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcascade.app.history_search import iso_time
from vcascade.edge.analytics.counting import EVENT_TYPES
from vcascade.edge.history.query import HistoryQuery, QueryError, parse_duration_s, parse_time_ms

ZONE_EVENTS = tuple(t for t in EVENT_TYPES if t.startswith("zone_"))
"""Event types a zone raises."""

HTTP_PARAMETERS = ("identity", "like_top", "like", "camera", "class", "event", "line", "zone", "text", "since", "from",
                   "to", "kind", "limit", "offset")  # fmt: skip
"""Parameters of ``/api/history/search``: the options of ``vcascade search`` without dashes (``--like-top``:
``like_top``), plus ``kind`` (``event``: events only) and ``offset`` (paging). Over HTTP ``like`` names a row (its
id) whose crop is the picture, not a file."""

REPEATABLE = frozenset({"camera"})
"""HTTP parameters that may be given more than once."""


@dataclass(frozen=True)
class QueryWords:
    """A query as typed: every field the text given (None: not given), ``cameras`` each ``--camera``.

    ``events_only``: only events, even without ``--event``/``--line``/``--zone`` (the HTTP ``kind=event``).
    """

    identity: str | None = None
    cameras: tuple[str, ...] = ()
    class_name: str | None = None
    event: str | None = None
    line: str | None = None
    zone: str | None = None
    text: str | None = None
    since: str | None = None
    from_time: str | None = None
    to_time: str | None = None
    limit: str | None = None
    events_only: bool = False


def parse_query(words: QueryWords, now_s: float, max_limit: int | None = None) -> HistoryQuery:
    """The query ``words`` ask, times relative to ``now_s`` (Unix seconds); ``limit`` defaults to 100 and may not
    pass ``max_limit`` (None: :data:`~vcascade.edge.history.query.MAX_LIMIT`).

    Raises:
        QueryError: a malformed number, time or duration, contradicting filters, an unknown event type, a bad limit.
    """
    if words.since is not None and words.from_time is not None:
        raise QueryError("--since and --from both give the start: use one")
    if words.line is not None and words.zone is not None:
        raise QueryError("--line and --zone: an event has one place; use one")
    event = words.event
    if words.line is not None:
        if event not in (None, "line_cross"):
            raise QueryError(f"--line with --event {event!r}: a line has line_cross events only")
        event = "line_cross"
    if words.zone is not None and event is not None and event not in ZONE_EVENTS:
        raise QueryError(f"--zone with --event {event!r}: a zone has {', '.join(ZONE_EVENTS)} events")
    from_ms = None
    if words.since is not None:
        from_ms = (now_s - parse_duration_s(words.since)) * 1000.0
    elif words.from_time is not None:
        from_ms = parse_time_ms(words.from_time, "--from")
    to_ms = None if words.to_time is None else parse_time_ms(words.to_time, "--to")
    limit = 100 if words.limit is None else parse_int(words.limit, "--limit")
    if max_limit is not None and not 1 <= limit <= max_limit:
        raise QueryError(f"--limit {limit}: expected 1..{max_limit}")
    return HistoryQuery(
        identity=None if words.identity is None else parse_int(words.identity, "--identity"),
        cameras=words.cameras, class_name=words.class_name, event_type=event,
        place=words.line if words.line is not None else words.zone,
        events_only=words.events_only or event is not None or words.zone is not None, text=words.text,
        from_ms=from_ms, to_ms=to_ms, limit=limit,
    )


def parse_int(text: str, word: str) -> int:
    """``text`` as an integer. Raises QueryError naming ``word``: not one."""
    try:
        return int(text.strip())
    except ValueError:
        raise QueryError(f"{word} {text!r}: expected an integer") from None


def words_from_params(params: Mapping[str, Sequence[str]]) -> tuple[QueryWords, int]:
    """The query of ``/api/history/search``'s parameters (:data:`HTTP_PARAMETERS`), and its ``offset`` (rows of
    newer matches skipped, 0 unless given).

    Raises:
        QueryError: an unknown parameter, one given twice that may not be (:data:`REPEATABLE`), a ``kind`` other
            than ``event``, a malformed ``offset``.
    """
    for name, values in params.items():
        if name == "token":  # the view's token gate reads it; not part of the query
            continue
        if name not in HTTP_PARAMETERS:
            raise QueryError(f"unknown parameter {name!r} (known: {', '.join(HTTP_PARAMETERS)})")
        if len(values) > 1 and name not in REPEATABLE:
            raise QueryError(f"--{name} given {len(values)} times: give it once")
    one = {name: values[0] for name, values in params.items() if values}
    kind = one.get("kind")
    if kind not in (None, "event"):
        raise QueryError(f"--kind {kind!r}: expected event (or no kind: results and events)")
    offset = parse_int(one.get("offset", "0"), "--offset")
    if offset < 0:
        raise QueryError(f"--offset {offset}: expected 0 or more")
    words = QueryWords(
        identity=one.get("identity"), cameras=tuple(params.get("camera", ())), class_name=one.get("class"),
        event=one.get("event"), line=one.get("line"), zone=one.get("zone"), text=one.get("text"),
        since=one.get("since"), from_time=one.get("from"), to_time=one.get("to"), limit=one.get("limit"),
        events_only=kind == "event",
    )
    return words, offset


_OPTION = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|--(%s)\b"""
                     % "|".join(name.replace("_", "-") for name in HTTP_PARAMETERS))
"""An option's name in a message (``--since``), or a value the message quotes (``'--5m'``, left as given)."""


def for_http(message: str) -> str:
    """A :class:`QueryError`'s message with the HTTP parameter names (``--since`` -> ``since``); the values it
    quotes (Python ``repr``) are left as given."""
    return _OPTION.sub(lambda m: m[1] or m[2].replace("-", "_"), message)


def row_json(row: dict[str, Any]) -> dict[str, Any]:
    """A search row for JSON: its columns, ``time`` (ISO 8601 UTC), ``merged_from`` (the other ids the identity
    asked for stands for), the absolute evidence paths ``crop_file``/``frame_file``; without the store's own
    relative paths, counted bytes and ``followed``."""
    keep = {k: v for k, v in row.items() if k not in ("crop_path", "frame_path", "followed", "bytes")}
    keep["time"] = iso_time(row["capture_unix_ms"])
    asked = row.get("like_identity", row["identity"])
    keep["merged_from"] = sorted(set(row["followed"]) - {asked}) if row["followed"] else []
    return keep

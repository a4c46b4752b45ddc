"""What ``vcascade search`` does (docs/HISTORY.md): find the history stores of a deployment, check the query
against what they hold, ask each, merge the answers by time, and copy their evidence images out.

The stores are opened read-only (SQLite's ``mode=ro``, a read-only PostgreSQL session), so a search never
blocks an edge writing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from vcascade.core.config import Deployment, load_config
from vcascade.core.private_files import make_private_dir, open_private
from vcascade.core.redact import redact
from vcascade.core.state_dir import state_path
from vcascade.core.schema.history import HistoryConfig
from vcascade.edge.history.query import HistoryQuery, QueryError
from vcascade.edge.history.postgres_store import PostgresHistory
from vcascade.edge.history.sqlite_store import DATABASE_FILE, SqliteHistory
from vcascade.edge.history.store import HistoryStore, StoreDown


class NoStore(QueryError):
    """No history store to search: none written yet where the edges keep theirs, or one cannot be opened now."""


@dataclass(frozen=True)
class Source:
    """One store to search: how to open it read-only (``open(budget_s)``: each query bounded to ``budget_s``
    seconds, None: unbounded) and the folder its evidence paths are relative to."""

    name: str
    folder: Path
    open: Callable[[float | None], HistoryStore]
    embedded: bool = False


@dataclass(frozen=True)
class Stores:
    """The stores to search and the cameras a query may name (None: any the stores hold)."""

    sources: tuple[Source, ...]
    cameras: frozenset[str] | None


def find_stores(file: Path | None, store: Path | None) -> Stores:
    """The store of folder ``store`` (given), else those of the edges of the deployment ``file``
    (:func:`stores_of`), else the default one (``history`` in the state folder).

    Raises:
        vcascade.core.config.ConfigError: ``file`` is invalid.
        NoStore: no history store where the edges keep theirs.
    """
    if file is not None and store is None:
        return stores_of(load_config(file))
    folder = store if store is not None else state_path(HistoryConfig().path)
    return _present([_sqlite_source(folder)], None, "the file")


def stores_of(dep: Deployment) -> Stores:
    """The stores of the edges of ``dep`` (each edge's ``history``: its SQLite folder, or its PostgreSQL server);
    queries may name the cameras of ``dep`` and any camera the stores hold (one added at run time).

    Raises:
        NoStore: no history store where the edges keep theirs (none written yet, or history disabled).
    """
    found = {}
    for edge in dep.edges.values():
        cfg = edge.history
        if not cfg.enabled:
            continue
        folder = state_path(cfg.path)
        if cfg.store.type == "postgres":
            found.setdefault(cfg.store.url, Source(redact(cfg.store.url), folder, _postgres_opener(cfg)))
        else:
            found.setdefault(str(folder), _sqlite_source(folder))
    return _present(list(found.values()), frozenset(dep.cameras), "the file")


def _present(sources: list[Source], cameras: frozenset[str] | None, where: str) -> Stores:
    present = tuple(s for s in sources if not s.embedded or (s.folder / DATABASE_FILE).is_file())
    if not present:
        raise NoStore(f"no history store in {', '.join(s.name for s in sources) or where} (an edge writes "
                         "one when it runs; --store DIR names another folder)")
    return Stores(present, cameras)


def _sqlite_source(folder: Path) -> Source:
    folder = folder.absolute()
    return Source(str(folder), folder, lambda budget_s: SqliteHistory(folder, readonly=True, budget_s=budget_s),
                  embedded=True)  # fmt: skip


def _postgres_opener(cfg: HistoryConfig) -> Callable[[float | None], HistoryStore]:
    """Opens ``cfg``'s PostgreSQL store read-only; its statement timeout is the budget (else ``cfg.timeout_s``)."""
    return lambda budget_s: PostgresHistory(cfg.store.url, budget_s or cfg.timeout_s, readonly=True)


def search(stores: Stores, query: HistoryQuery, budget_s: float | None = None) -> list[dict[str, Any]]:
    """The rows answering ``query`` from every store, oldest first, the newest ``query.limit`` of them; each row's
    evidence paths made absolute (``crop_file``, ``frame_file``; None: no image). ``budget_s`` bounds each
    store's query (None: unbounded).

    Raises:
        QueryError: a camera of the query is unknown (neither in the deployment file nor in any store).
        NoStore: a store cannot be opened. StoreDown: a store failed to answer, or ran past ``budget_s``.
    """
    opened: list[tuple[Source, HistoryStore]] = []
    try:
        for source in stores.sources:
            try:
                opened.append((source, source.open(budget_s)))
            except StoreDown as exc:
                raise NoStore(f"{source.name}: {exc}") from None
        # a camera added at run time is in no file but has rows: the stores' cameras are known either way
        known = frozenset().union(stores.cameras or (), *(s.cameras() for _, s in opened))
        for camera in query.cameras:
            if camera not in known:
                where = "the deployment file or its history" if stores.cameras is not None else "the history"
                raise QueryError(f"--camera {camera!r}: no such camera in {where} (known: "
                                 f"{', '.join(sorted(known)) or 'none'})")
        rows = []
        for source, store in opened:
            for row in store.query(query):
                row["crop_file"] = str(source.folder / row["crop_path"]) if row["crop_path"] else None
                row["frame_file"] = str(source.folder / row["frame_path"]) if row["frame_path"] else None
                rows.append(row)
    finally:
        for _, store in opened:
            store.close()
    rows.sort(key=lambda row: row["capture_unix_ms"])
    return rows[-query.limit:]


def evidence_file(stores: Stores, ref: str, image: str, budget_s: float | None = None) -> Path | None:
    """The evidence file of the row ``ref`` (a result's or an event's id): ``image`` ``crop`` or ``frame``; None when
    no store has the row, the row has no such image, or its file is gone or lies outside its store's folder (a
    path in the database is never followed out of it).

    Raises:
        NoStore: a store cannot be opened. StoreDown: a store failed to answer or ran past ``budget_s``.
    """
    for source in stores.sources:
        try:
            store = source.open(budget_s)
        except StoreDown as exc:
            raise NoStore(f"{source.name}: {exc}") from None
        try:
            rows = store.query(HistoryQuery(ref=ref, limit=1))
        finally:
            store.close()
        relative = rows[0][f"{image}_path"] if rows else None
        if relative:
            folder = source.folder.resolve()
            path = (folder / relative).resolve()
            inside = path.is_relative_to(folder) and path != folder
            return path if inside and path.is_file() else None
    return None


def iso_time(unix_ms: float) -> str:
    """A capture time as ISO 8601 UTC with milliseconds (``2026-12-03T08:00:00.123Z``)."""
    return datetime.fromtimestamp(unix_ms / 1000.0, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def save_evidence(rows: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Copy each row's images into ``folder`` (created ``0700``; files ``0600``: they show people), named
    ``<capture time>_<camera>_<event type or kind>_<ref>-<crop|frame>.jpg``; returns the files written.

    Raises:
        OSError: ``folder`` cannot be created or written.
    """
    make_private_dir(folder)
    written = []
    for row in rows:
        stamp = iso_time(row["capture_unix_ms"]).replace(":", "-")
        what = row["event_type"] or row["kind"]
        for image in ("crop", "frame"):
            source = row[f"{image}_file"]
            if source is None or not Path(source).is_file():
                continue
            target = folder / f"{stamp}_{row['camera']}_{what}_{row['ref']}-{image}.jpg"
            fd = open_private(target, os.O_WRONLY | os.O_TRUNC)
            with open(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out)
            written.append(target)
    return written

"""``vcascade search [FILE] [--store DIR] [filters] [--like IMAGE] [--json] [--save DIR]``: the history of a
deployment's edges (docs/HISTORY.md), as a table, JSON for scripts, or evidence images copied to a folder
(:mod:`vcascade.app.history_search`); ``--like`` first finds the identities like an image
(:mod:`vcascade.app.like_image`). A bad query prints one line naming the problem and exits 2."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from vcascade.app.commands import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from vcascade.app.commands.options import add_model_dir
from vcascade.app.history_request import QueryWords, parse_query, row_json
from vcascade.app.history_search import find_stores, iso_time, save_evidence, search
from vcascade.app.like_image import Neighbour, embed, embedding_recognizer, like_rows, nearest_identities, read_image
from vcascade.core.config import load_config
from vcascade.edge.analytics.counting import EVENT_TYPES
from vcascade.edge.history.query import HistoryQuery, QueryError
from vcascade.edge.history.store import StoreDown


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The store, the filters and the output."""
    parser.add_argument("file", type=Path, nargs="?", help="deployment file: search the history of its edges")
    parser.add_argument("--store", type=Path, help="a history folder to search instead (default: history in the "
                        "state folder, $VCASCADE_STATE_DIR or ./state)")
    parser.add_argument("--identity", type=int, help="rows of this identity and of every id merged into it")
    parser.add_argument("--like", type=Path, metavar="IMAGE", help="rows of the identities like this picture (the "
                        "file's embedding recognizer embeds it; its identity store gives the nearest identities)")
    parser.add_argument("--recognizer", help="with --like: the embedding recognizer (default: the file's only one)")
    parser.add_argument("--like-top", type=int, default=5, help="with --like: at most this many identities (default 5)")
    parser.add_argument("--camera", action="append", default=[], help="rows of this camera (repeat for several)")
    parser.add_argument("--class", dest="class_name", help="rows of this detector class, e.g. person")
    parser.add_argument("--event", help=f"only events of this type ({', '.join(EVENT_TYPES)})")
    parser.add_argument("--line", help="only crossings of this counting line")
    parser.add_argument("--zone", help="only events of this zone")
    parser.add_argument("--text", help="rows whose text reading contains this (case-insensitive)")
    parser.add_argument("--since", help="rows captured in this last span: 90s, 15m, 1h, 2d, 1w")
    parser.add_argument("--from", dest="from_time", help="rows captured from this time (ISO 8601, UTC unless a zone "
                        "is given, or Unix seconds)")
    parser.add_argument("--to", dest="to_time", help="rows captured before this time")
    parser.add_argument("--limit", type=int, default=100, help="the newest N rows, shown oldest first (default 100)")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON array")
    parser.add_argument("--save", type=Path, metavar="DIR", help="copy the rows' evidence images into DIR")
    add_model_dir(parser)


def handle(args: argparse.Namespace) -> int:
    """Run the search and print it; a bad query is one line on stderr and exit 2."""
    try:
        query = build_query(args, time.time())
        image = None if args.like is None else like_image(args)
        stores = find_stores(args.file, args.store)
        if image is None:
            rows = search(stores, query)
        else:
            rows = like_rows(stores, query, like(args, image))
    except QueryError as exc:
        print(f"vcascade search: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreDown as exc:
        print(f"vcascade search: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if args.like is not None and not rows:
        print(f"vcascade search: no identity at or above the recognizer's match_threshold is like {args.like}",
              file=sys.stderr)
    if args.save is not None:
        saved = save_evidence(rows, args.save)
        print(f"saved {len(saved)} evidence images to {args.save}", file=sys.stderr)
    if args.json:
        print(json.dumps([row_json(row) for row in rows], indent=1))
    elif args.like is not None:
        for identity in dict.fromkeys(row["like_identity"] for row in rows):
            print_table([row for row in rows if row["like_identity"] == identity], identity)
    else:
        print_table(rows, args.identity)
    return EXIT_OK


def like_image(args: argparse.Namespace) -> np.ndarray:
    """The ``--like`` image, checked with its arguments before anything loads. Raises QueryError: no file, an
    ``--identity`` too, a bad ``--like-top``, an image that is not one."""
    if args.file is None:
        raise QueryError("--like needs the deployment FILE (its embedding recognizer and identity store)")
    if args.identity is not None:
        raise QueryError("--like and --identity both name the identity: use one")
    if args.like_top < 1:
        raise QueryError(f"--like-top {args.like_top}: expected 1 or more")
    return read_image(args.like)


def like(args: argparse.Namespace, image: np.ndarray) -> list[Neighbour]:
    """The identities like ``image`` (:mod:`vcascade.app.like_image`). Raises QueryError: no embedding
    recognizer in the file."""
    name, rec_cfg = embedding_recognizer(load_config(args.file), args.recognizer)
    return nearest_identities(name, rec_cfg, embed(rec_cfg, image, args.model_dir), args.like_top)


def build_query(args: argparse.Namespace, now_s: float) -> HistoryQuery:
    """The query the arguments ask, times relative to ``now_s`` (Unix seconds), read by
    :func:`vcascade.app.history_request.parse_query` (the live view's HTTP API reads its parameters there too).

    Raises:
        QueryError: a malformed time or duration, contradicting filters, an unknown event type, a bad limit.
    """
    words = QueryWords(
        identity=None if args.identity is None else str(args.identity), cameras=tuple(args.camera),
        class_name=args.class_name, event=args.event, line=args.line, zone=args.zone, text=args.text,
        since=args.since, from_time=args.from_time, to_time=args.to_time, limit=str(args.limit),
    )
    return parse_query(words, now_s)


def print_table(rows: list[dict[str, Any]], identity: int | None) -> None:
    """The rows as a table: time, camera, what (result or event, with place), class, track, identity, text,
    evidence; for an identity, the ids its merges added."""
    console = Console(soft_wrap=False)
    if not rows:
        console.print("no rows match")
        return
    followed = sorted(set(rows[0]["followed"]) - {identity}) if identity is not None else []
    title = f"identity {identity}" + (f" (merged from {', '.join(map(str, followed))})" if followed else "") \
        if identity is not None else None
    if identity is not None and "like_similarity" in rows[0]:
        title += f", like the image at similarity {rows[0]['like_similarity']:.2f}"
    table = Table(title=title)
    for column in ("time (UTC)", "camera", "what", "class", "track", "identity", "text", "evidence"):
        table.add_column(column, overflow="fold")
    for row in rows:
        what = row["kind"] if row["event_type"] is None else " ".join(
            p for p in (row["event_type"], row["place"], row["direction"]) if p)
        table.add_row(
            iso_time(row["capture_unix_ms"]), row["camera"], what, row["class_name"], str(row["track_id"]),
            "" if row["identity"] is None else str(row["identity"]), row["text"] or "",
            "\n".join(p for p in (row["crop_file"], row["frame_file"]) if p),
        )
    console.print(table)

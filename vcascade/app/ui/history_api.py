"""The history over HTTP (docs/HISTORY.md): ``vcascade search``'s queries as JSON on the live view's server, and
the evidence images of the rows they find, for the review pages.

===========================================  ============================================================
path                                         answer
===========================================  ============================================================
``/api/history/search?PARAMS``               JSON ``{"rows": [...], "offset", "limit", "more"}``: the
                                             matching rows, newest first; PARAMS are ``vcascade search``'s
                                             options without dashes
                                             (:data:`~vcascade.app.history_request.HTTP_PARAMETERS`)
``/api/history/search?like=<ref>&PARAMS``    the same, for the identities like the crop kept with row
                                             ``ref`` (:mod:`~vcascade.app.ui.history_like`): grouped by
                                             identity, most similar first (``"like"``: their similarity)
``/api/history/evidence/<ref>/crop.jpg``     the ROI crop kept with row ``ref`` (a result's or an event's id)
``/api/history/evidence/<ref>/frame.jpg``    the annotated frame kept with event ``ref``
``/api/history/counts``                      JSON: what this API answered and refused, by reason
===========================================  ============================================================

Bounds: ``limit`` at most :data:`MAX_LIMIT`, ``like_top`` at most
:data:`~vcascade.app.ui.history_like.MAX_LIKE_TOP`, one like-query embedding at a time (another is a 503),
``offset + limit`` under
:data:`~vcascade.edge.history.query.MAX_LIMIT`, each store's query at most :data:`QUERY_BUDGET_S` (400 with one
line naming the parameter for a bad one, as ``vcascade search`` exits 2; 503 with the store's reason when a
store is down or too slow). Evidence is found by the row's id only, read from the store's own folder (a path is
never taken from the client, and one in the database leading out of the folder is refused), at most
:data:`MAX_EVIDENCE_BYTES`, and ``Cache-Control: no-store`` like every answer of the view (an image that retention
or a redaction change removed is not kept on in a browser's cache). Every answer and refusal is counted
(``/api/history/counts``), an unexpected failure too: a 500 ``internal error`` counted as ``ROUTE_internal_error``
(``search``, ``like``, ``evidence``) with one log line naming the exception's type and where it was raised, never
its message (it may quote a row: personal data); the server keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from vcascade.app.history_request import for_http, parse_query, row_json, words_from_params
from vcascade.app.history_search import NoStore, evidence_file, search, stores_of
from vcascade.app.like_image import like_rows
from vcascade.app.ui.history_like import LikeBusy, LikeRefused, LikeSearch, like_params
from vcascade.core.config import Deployment
from vcascade.core.telemetry.http import Request, Response, json_response, text
from vcascade.core.telemetry.logs import failure_site
from vcascade.edge.history.query import MAX_LIMIT as MAX_ROWS
from vcascade.edge.history.query import QueryError
from vcascade.edge.history.store import StoreDown

log = logging.getLogger(__name__)

MAX_LIMIT = 500
"""Most rows one ``/api/history/search`` answer holds (a page of the review pages is 50)."""

QUERY_BUDGET_S = 2.0
"""Longest each store's query may run for one request, s (SQLite interrupts it; PostgreSQL's
``statement_timeout``)."""

MAX_EVIDENCE_BYTES = 8 * 1024 * 1024
"""Largest evidence image served, bytes (an annotated 4K frame as JPEG is about 2 MiB)."""

REF = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What a row id looks like (the edge's ROI and event ids); anything else is refused before a store is asked."""

EVIDENCE_IMAGES = {"crop.jpg": "crop", "frame.jpg": "frame"}
"""The evidence images of a row, by the name in its URL."""


class EvidenceRefused(Exception):
    """An evidence file over :data:`MAX_EVIDENCE_BYTES`."""


def read_evidence(path: Path, ref: str, image: str) -> bytes:
    """The bytes of the evidence file ``path`` (``image`` of row ``ref``), in one bounded read: a file that grew
    since it was found is still cut off.

    Raises:
        EvidenceRefused: it is over :data:`MAX_EVIDENCE_BYTES`. OSError: it cannot be read.
    """
    with path.open("rb") as file:
        body = file.read(MAX_EVIDENCE_BYTES + 1)
    if len(body) > MAX_EVIDENCE_BYTES:
        raise EvidenceRefused(f"the {image} of {ref} is over {MAX_EVIDENCE_BYTES} bytes")
    return body


class HistoryApi:
    """The ``/api/history/`` answers for ``dep``'s history stores (those of its edges, found on each request: a
    store written after the view started is found); like-queries load the embedding recognizer's model from
    ``model_dir`` first (``--model-dir``)."""

    def __init__(self, dep: Deployment, model_dir: str | None = None) -> None:
        self.dep = dep
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._like = LikeSearch(dep, read_evidence, model_dir)

    def answer(self, request: Request) -> Response:
        """The answer to a request whose path starts ``/api/history/``; an unexpected exception is a counted 500
        (see the module doc)."""
        try:
            return self._route(request)
        except Exception as exc:  # a bug or a store damaged in a way no reader expects: counted, logged, served on
            route = request.path[len("/api/history/"):].partition("/")[0]
            if route == "search" and request.query.get("like"):
                route = "like"
            log.error("history API: a %s request failed: %s", route, failure_site(exc))
            return self._refuse(500, f"{route}_internal_error", "internal error: see the view's log")

    def _route(self, request: Request) -> Response:
        what = request.path[len("/api/history/"):]
        if what == "search":
            return self.search(request.query)
        if what == "counts":
            with self._lock:
                return json_response(dict(sorted(self._counts.items())))
        if what.startswith("evidence/"):
            ref, _, image = what[len("evidence/"):].partition("/")
            return self.evidence(ref, image)
        return text(404, "not found")

    def search(self, params: dict[str, list[str]]) -> Response:
        """The rows of the query ``params`` ask, newest first, ``offset`` newer ones skipped."""
        like = None
        try:
            words, offset = words_from_params(params)
            ask = like_params(params, REF.fullmatch)
            query = parse_query(words, time.time(), max_limit=MAX_LIMIT)
            if offset + query.limit >= MAX_ROWS:  # one more row is asked, to tell whether a next page exists
                raise QueryError(f"--offset {offset}: offset + limit must stay under {MAX_ROWS}")
            stores = stores_of(self.dep)
            asked = dataclasses.replace(query, limit=offset + query.limit + 1)
            if ask is None:
                newest = search(stores, asked, budget_s=QUERY_BUDGET_S)[::-1]
            else:
                like = self._like.neighbours(stores, ask, QUERY_BUDGET_S)
                newest = [row for n in like for row in like_rows(stores, asked, [n], QUERY_BUDGET_S)[::-1]]
        except NoStore as exc:
            return self._refuse(503, "search_no_store", str(exc))
        except LikeRefused as exc:
            return self._refuse(400, exc.reason, for_http(str(exc)))
        except QueryError as exc:
            return self._refuse(400, "search_bad_request", for_http(str(exc)))
        except StoreDown as exc:
            return self._refuse(503, "search_store_down", str(exc))
        except EvidenceRefused as exc:
            return self._refuse(400, "like_no_crop", f"like: {exc}")
        except LikeBusy as exc:
            return self._refuse(503, "like_busy", str(exc))
        except (OSError, RuntimeError) as exc:  # the embedding model cannot be read or run
            return self._refuse(503, "like_model_failed", f"the embedding recognizer: {exc}")
        page = newest[offset:offset + query.limit]
        self._count("search_ok" if like is None else "like_ok")
        answer = {"rows": [web_row(row) for row in page], "offset": offset, "limit": query.limit,
                  "more": len(newest) > offset + query.limit}  # fmt: skip
        if like is not None:
            answer["like"] = [{"identity": n.identity, "similarity": n.similarity} for n in like]
        return json_response(answer)

    def evidence(self, ref: str, image: str) -> Response:
        """The JPEG ``image`` (``crop.jpg`` or ``frame.jpg``) of row ``ref``."""
        if image not in EVIDENCE_IMAGES or REF.fullmatch(ref) is None:
            return self._refuse(404, "evidence_bad_name", "not found: /api/history/evidence/<id>/crop.jpg or frame.jpg")
        try:
            path = evidence_file(stores_of(self.dep), ref, EVIDENCE_IMAGES[image], budget_s=QUERY_BUDGET_S)
            if path is None:
                return self._refuse(404, "evidence_not_found", f"no {image} kept for {ref}")
            body = read_evidence(path, ref, image)
        except EvidenceRefused as exc:
            return self._refuse(413, "evidence_too_large", str(exc))
        except NoStore as exc:
            return self._refuse(503, "evidence_no_store", str(exc))
        except (StoreDown, OSError) as exc:
            return self._refuse(503, "evidence_store_down", f"history store: {exc}")
        self._count("evidence_ok")
        return Response(200, "image/jpeg", body)  # no-store, as every answer: faces are not kept in a browser's cache

    def _refuse(self, status: int, reason: str, message: str) -> Response:
        self._count(reason)
        return text(status, message)

    def _count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1


def web_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row for the page: :func:`~vcascade.app.history_request.row_json` without file paths (this host's, not
    the browser's), with ``crop_url`` and ``frame_url`` (None: no image kept)."""
    keep = row_json(row)
    for image in ("crop", "frame"):
        keep[f"{image}_url"] = f"/api/history/evidence/{row['ref']}/{image}.jpg" if keep.pop(f"{image}_file") else None
    return keep

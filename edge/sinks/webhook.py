"""The HTTP webhook sink: records POSTed in batches, as one JSON array per request (requests).

Follow one batch: the queue's delivery thread (:mod:`vcascade.edge.sinks.queue`) collects up to ``batch_max`` records,
waiting at most ``batch_wait_s`` after the first, and hands them to :meth:`WebhookSink.deliver`, which POSTs them
as ``[record, ...]`` with ``Content-Type: application/json`` (and ``Authorization: <auth_header>`` when set).

- 2xx: every record of the batch is delivered.
- a connection error, a timeout (``timeout_s`` to connect and for each read), an attempt still running at
  ``deadline_s`` (``deadline``: a receiver trickling its answer), an answer longer than :data:`ANSWER_MAX_BYTES`
  (``answer_too_large``; it is read no further), 408, 429 or 5xx: the attempt is counted
  (``vcascade_edge_sink_attempts_failed_total{reason}``) and the same batch is sent again after a capped,
  fully jittered exponential backoff (:class:`vcascade.edge.capture.backoff.Backoff`), up to ``max_attempts`` sends; then
  its records are dropped as ``retries_exhausted``. Records arriving meanwhile wait in the bounded queue and go
  out in order afterwards. A retried batch may arrive twice (the receiver timed out after storing it):
  receivers remove duplicates by ``event_id`` or ``roi_id``.
- any other status (3xx, 4xx): the receiver refuses the batch and sending it again would not help; its records
  are dropped as ``rejected`` and the status and the start of the body are logged.
"""

from __future__ import annotations

import requests
import urllib3
import zmq

from vcascade.core.config import WebhookSinkConfig
from vcascade.core.redact import redact_url
from vcascade.edge.capture.backoff import Backoff
from vcascade.edge.sinks.http_deadline import DeadlineSession
from vcascade.edge.sinks.queue import Entry, QueuedSink, SinkBooks, encoded

RETRY_STATUSES = {408: "http_408", 429: "http_429"}
"""HTTP statuses below 500 that are worth another attempt (RFC 9110 15.5.9 Request Timeout; RFC 6585 section 4
Too Many Requests), with their ``reason`` label."""
BODY_SHOWN_CHARS = 200
"""Characters of a refusing response's body kept in the error text."""
ANSWER_MAX_BYTES = 64 * 1024
"""Bytes of an answer read at most: a receiver answers a POST of records with a status and a short text; more
is counted as ``answer_too_large`` (the edge's memory stays its own)."""


def batch_body(payloads: list[bytes]) -> bytes:
    """The POST body of one batch: the records' JSON texts as one JSON array (UTF-8)."""
    return b"[" + b",".join(payloads) + b"]"


class WebhookSink:
    """:class:`~vcascade.edge.sinks.queue.Delivery` backend POSTing batches to one HTTP(S) endpoint.

    Args:
        cfg: the sink's configuration (``auth_header`` already resolved from ``${VAR}``).
        ctx: unused (the registry's common signature).
        edge: the edge's name (metric label).
        label: the sink's name in metrics and snapshots, e.g. ``webhook[2]``.
    """

    def __init__(self, cfg: WebhookSinkConfig, ctx: zmq.Context | None, edge: str = "", label: str = "webhook") -> None:
        self.cfg, self.label = cfg, label
        self.books = SinkBooks(edge, label)
        self.shown_url = redact_url(cfg.url)
        """The URL as logs and snapshots show it (``user:password@`` replaced)."""
        self.batch_max, self.batch_wait_s = cfg.batch_max, cfg.batch_wait_s
        self._http = DeadlineSession()
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if cfg.auth_header is not None:
            self._headers["Authorization"] = cfg.auth_header.get_secret_value()

    def deliver(self, batch: list[Entry], ledger: QueuedSink) -> None:
        """POST the batch until it is answered 2xx, refused, or ``max_attempts`` sends failed (see module doc)."""
        items = encoded(batch, ledger)
        if not items:
            return
        entries = [entry for entry, _ in items]
        body = batch_body([payload for _, payload in items])
        backoff = Backoff(self.cfg.backoff_initial_s, self.cfg.backoff_max_s)
        detail = ""
        for attempt in range(1, self.cfg.max_attempts + 1):
            if ledger.abandoned.is_set():
                return
            outcome, detail = self._post(body)
            if outcome == "ok":
                ledger.settle(entries)
                return
            if outcome == "rejected":
                ledger.settle(entries, "rejected", detail)
                return
            self.books.attempt_failed(outcome, detail)
            if attempt < self.cfg.max_attempts and ledger.abandoned.wait(backoff.next_delay_s()):
                return
        ledger.settle(entries, "retries_exhausted", f"{self.cfg.max_attempts} sends failed, the last: {detail}")

    def _post(self, body: bytes) -> tuple[str, str]:
        """One POST, its answer read to :data:`ANSWER_MAX_BYTES`, all within ``deadline_s``: ``("ok", "")``,
        ``("rejected", why)`` or ``(retry reason, why)``."""
        with self._http.attempt(self.cfg.deadline_s) as attempt:
            try:
                response = self._http.session.post(
                    self.cfg.url, data=body, headers=self._headers, timeout=(self.cfg.timeout_s, self.cfg.timeout_s),
                    verify=self.cfg.verify_tls, allow_redirects=False, stream=True,
                )
                try:
                    answer = response.raw.read(ANSWER_MAX_BYTES + 1, decode_content=False)
                finally:
                    response.close()  # an answer not read to its end closes the connection, nothing more is read
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt.expired:
                    return "deadline", f"{self.shown_url} took longer than deadline_s = {self.cfg.deadline_s} s"
                if isinstance(exc, requests.Timeout | urllib3.exceptions.TimeoutError | TimeoutError):
                    return "timeout", f"no answer from {self.shown_url} within {self.cfg.timeout_s} s ({type(exc).__name__})"
                return "connection", redact_url(f"{self.shown_url}: {type(exc).__name__}: {exc}")
        if attempt.expired:  # cut off mid-answer: the read ended early at the shutdown
            return "deadline", f"{self.shown_url} took longer than deadline_s = {self.cfg.deadline_s} s"
        if len(answer) > ANSWER_MAX_BYTES:
            return "answer_too_large", f"{self.shown_url} answered more than {ANSWER_MAX_BYTES} bytes"
        status = response.status_code
        if 200 <= status < 300:
            return "ok", ""
        shown = answer[:BODY_SHOWN_CHARS * 4].decode("utf-8", "replace")[:BODY_SHOWN_CHARS]
        if status >= 500 or status in RETRY_STATUSES:
            return RETRY_STATUSES.get(status, "http_5xx"), f"{self.shown_url} answered HTTP {status}: {shown}"
        return "rejected", f"{self.shown_url} refused the batch: HTTP {status}: {shown}"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()


"""Hide secrets before any text leaves the process: logs, camera snapshots and states, control answers, sink
records, ``check`` output and warnings.

One function, :func:`redact`, is used by every exit. It hides three things:

- **Credentials in URLs**, parsed the way FFmpeg reads them (``av_url_split`` in libavformat/utils.c): after
  ``scheme://`` everything up to the *last* ``@`` is the user information, so a password holding ``@``, ``/``,
  ``:`` or a space is hidden whole (``rtsp://***@host/...``). When unsure, more is hidden, never less.
- **Credentials by name** in a URL's query or path and in ``name=value`` text: the value of every parameter whose
  name holds one of :data:`SECRET_NAMES` (``pwd``, ``password``, ``token``, ``key``, ``auth``, ``sig``...), as IP
  cameras take them (``?user=admin&pwd=...``, ``/user=admin_password=..._channel=1``).
- **Secrets seen before**: every secret :func:`remember` was given (the configuration's passwords, tokens,
  webhook paths, URL credentials; :func:`remember_url`, :func:`remember_config`), wherever it shows up again,
  e.g. echoed inside an error message of a library. Values shorter than :data:`MIN_REMEMBERED_CHARS` are not
  remembered (they would blank out ordinary words); the structural rules above still hide them in URLs.

Webhook URLs carry their secret in the path (``https://hooks.example.com/services/T0/B0/XXXX``):
:func:`redact_webhook_url` shows only scheme and host.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus

MASK = "***"
"""What a hidden secret is replaced with."""

SECRET_NAMES = (
    "pwd", "pass", "token", "key", "auth", "secret", "sig", "credential", "session", "cookie", "bearer",
)
"""A parameter whose name (lower case, ``_``/``-`` ignored) contains one of these has its value hidden:
``pwd``, ``password``, ``passwd``, ``passphrase``, ``token``, ``access_token``, ``key``, ``apikey``, ``api_key``,
``authbasic``, ``auth``, ``secret``, ``client_secret``, ``sig``, ``signature``, ``X-Amz-Signature``, ...."""

MIN_REMEMBERED_CHARS = 4
"""Shortest value :func:`remember` keeps, in characters."""
MAX_REMEMBERED = 4096
"""Values :func:`remember` keeps at most (cameras added at run time add theirs): bounds the memory and the time
every :func:`redact` call spends; beyond it, new values are hidden only by the structural rules."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_NAMES = "|".join(SECRET_NAMES)
# name=value (query, path or text); the value runs to the next separator, or to "_name=" (Hikvision-style paths)
_PARAM = re.compile(
    rf"(?P<name>[A-Za-z0-9_.-]*(?:{_NAMES})[A-Za-z0-9_.-]*?)(?P<eq>=|%3[Dd])"
    rf"(?P<value>.*?)(?=[&;\s\"'<>]|_[A-Za-z]+=|$)",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    r"(?P<name>\b(?:Bearer\s+|Basic\s+(?=[A-Za-z0-9+/]{6,}))|\bToken\s+(?=\S*\d))(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)

_lock = threading.Lock()
_remembered: frozenset[str] = frozenset()
_pattern: re.Pattern[str] | None = None


def remember(*secrets: str | None) -> None:
    """Hide these values wherever they appear in later :func:`redact` calls (any thread), with their
    percent-decoded forms. Values shorter than :data:`MIN_REMEMBERED_CHARS` and None are ignored."""
    global _remembered, _pattern
    found = set()
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, unquote(secret), unquote_plus(secret)}:
            if len(form) >= MIN_REMEMBERED_CHARS:
                found.add(form)
    with _lock:
        if found <= _remembered or len(_remembered) >= MAX_REMEMBERED:
            return
        _remembered = _remembered | set(sorted(found - _remembered)[: MAX_REMEMBERED - len(_remembered)])
        _pattern = None  # compiled again by the next redact()


def _compile() -> re.Pattern[str] | None:
    """The pattern of the remembered secrets, compiled once after they change (longest first, so a secret that
    contains another is hidden whole)."""
    global _pattern
    with _lock:
        if _pattern is None and _remembered:
            _pattern = re.compile("|".join(re.escape(s) for s in sorted(_remembered, key=len, reverse=True)))
        return _pattern


def forget_all() -> None:
    """Drop every remembered secret (tests)."""
    global _remembered, _pattern
    with _lock:
        _remembered, _pattern = frozenset(), None


def remember_url(url: str) -> None:
    """Remember the secrets of a configured URL: its user information (whole, and the password alone), and the
    values of its query and path parameters named like secrets (:data:`SECRET_NAMES`)."""
    for start, end in _urls(url):
        userinfo = _userinfo_span(url, start, end)
        if userinfo:
            info = url[userinfo[0]:userinfo[1]]
            password = info.partition(":")[2]
            # FFmpeg cuts the host at the first '/', '?' or '#', so parts of such a password show up as a host name
            remember(info, password, *re.split(r"[/?#@]", password))
        for match in _PARAM.finditer(url, start, end):
            remember(match.group("value"))


def remember_config(tree: Any) -> None:
    """Remember the secrets of a parsed configuration tree (dicts, lists, strings): every URL's credentials
    (:func:`remember_url`), the value of every key named like a secret (``password``, ``token``,
    ``auth_header``...), and the path and query of webhook URLs (key ``url`` under a ``type: webhook`` mapping)."""
    if isinstance(tree, Mapping):
        webhook = tree.get("type") == "webhook"
        for key, value in tree.items():
            if isinstance(value, str):
                if _config_secret_name(str(key)):
                    header = _AUTH_HEADER.match(value)
                    remember(value, header.group("value") if header else None)
                if webhook and key == "url":
                    remember_webhook_url(value)
            remember_config(value)
    elif isinstance(tree, list):
        for value in tree:
            remember_config(value)
    elif isinstance(tree, str) and "://" in tree:
        remember_url(tree)


def remember_webhook_url(url: str) -> None:
    """Remember a webhook URL's secret part: its path and query, its path alone and the path's last segment (where
    Slack, Discord and most hook services put the token), and its URL secrets."""
    remember_url(url)
    match = _SCHEME.match(url)
    if match:
        rest = url[match.end():]
        slash = rest.find("/")
        if slash >= 0 and len(rest) - slash > 1:
            path = re.split(r"[?#]", rest[slash:])[0]
            remember(rest[slash:], rest[slash + 1:], path, path.rstrip("/").rpartition("/")[2])


def redact(text: Any) -> str:
    """``text`` (``str()`` of it) with every secret hidden (see the module docstring); other text unchanged.

    >>> redact("rtsp://admin:p@ss/w rd@10.0.0.5:554/Streaming?user=admin&pwd=hunter22 failed")
    'rtsp://***@10.0.0.5:554/Streaming?user=admin&pwd=*** failed'
    """
    text = text if isinstance(text, str) else str(text)
    pattern = _pattern if _pattern is not None or not _remembered else _compile()
    if pattern is not None:
        text = pattern.sub(MASK, text)
    text = _hide_spans(text, [*_userinfo_spans(text), *_param_spans(text)])
    return _AUTH_HEADER.sub(lambda m: m.group("name") + MASK, text)


redact_url = redact
"""The same function, by the name older callers use."""


def redact_webhook_url(url: str) -> str:
    """A webhook URL as it may be shown: scheme and host only (``https://hooks.example.com/***``); the path and
    query, which carry the hook's secret, are hidden."""
    match = _SCHEME.match(url)
    if not match:
        return redact(url)
    rest = url[match.end():]
    at = rest.rfind("@")
    host_part = rest[at + 1:] if at >= 0 else rest
    cut = re.search(r"[/?#]", host_part)
    host = host_part[: cut.start()] if cut else host_part
    shown = f"{match.group(0)}{MASK + '@' if at >= 0 else ''}{host}"
    return shown + (f"/{MASK}" if cut else "")


def redact_mapping(value: Any) -> Any:
    """``value`` with :func:`redact` applied to every string inside (dicts, lists and tuples rebuilt; other
    values as they are): for records and snapshots built from many strings."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_mapping(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_mapping(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_mapping(v) for v in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter for handlers: formats the record's message (and its exception text) and hides secrets in
    it (:func:`redact`), so no handler after it can print one. Installed on the root handler by
    :func:`vcascade.core.telemetry.logs.configure_logging`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a template that does not fit its args: never raise into the caller of log.*()
            message = f"{record.msg} (arguments: {record.args!r})"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:  # formatters print exc_text when it is set (exc_info is kept for the level's sake)
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


# ---------------------------------------------------------------- internals


def _config_secret_name(name: str) -> bool:
    """A configuration key that holds a secret: ``password``, ``token``, ``auth_header``, ``api_key``...; not
    ``key_file``, ``keys_dir`` (paths to secrets are not secrets)."""
    folded = name.lower().replace("_", "").replace("-", "")
    if any(part in folded for part in ("file", "dir", "path")):
        return False
    return any(part in folded for part in ("pwd", "pass", "token", "secret", "auth", "credential")) or (
        folded.endswith("key"))


def _param_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the values of parameters named like secrets."""
    if "=" not in text and "%3" not in text:
        return []
    return [m.span("value") for m in _PARAM.finditer(text) if m.group("value") and m.group("value") != MASK]


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the user information of every URL in ``text``."""
    if "://" not in text:
        return []
    spans = (_userinfo_span(text, start, end) for start, end in _urls(text))
    return [span for span in spans if span and text[span[0]:span[1]] != MASK]


def _hide_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span (overlapping ones merged) replaced by :data:`MASK`; both kinds of span are found
    on the same text, so neither rule can move a secret out of the other's reach."""
    if not spans:
        return text
    pieces, last = [], 0
    for start, end in sorted(spans):
        if start < last:  # overlaps the span just hidden: extend it
            if end > last:
                last = end
            continue
        pieces.append(text[last:start] + MASK)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _urls(text: str) -> Iterable[tuple[int, int]]:
    """``(start, end)`` of each URL in ``text``: from its scheme to the next scheme, line break or the end."""
    starts = [m.start() for m in _SCHEME.finditer(text)]
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(text)
        line_end = text.find("\n", start, end)
        yield start, (line_end if line_end >= 0 else end)


def _userinfo_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Span of the user information of the URL at ``text[start:end]``: after ``://``, up to its last ``@``."""
    after = text.index("://", start) + 3
    at = text.rfind("@", after, end)
    return (after, at) if at > after else None

"""The one pattern of component names (cameras, edges, brokers, workers, recognizers, stage groups).

Config keys follow it (:mod:`vcascade.core.schema.base`), and so does every name a peer puts on the wire
(:mod:`vcascade.core.protocol.wire`): a name becomes a metric label value and a value in result lines, so what a peer
may send there is bounded like what a config file may hold. Kept apart so that the wire protocol does not
import the config schema (pydantic).
"""

import re

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""A name: a letter or digit, then letters, digits, ``_``, ``.``, ``-``; 63 characters at most."""

NAME_MAX_CHARS = 63
"""Characters of a name at most (:data:`NAME_PATTERN`)."""

MAX_NAMES_REMEMBERED = 4096
"""Names :func:`check_name` remembers as checked (a peer making up names fills it, then each new name is checked by
the regular expression again: memory stays bounded)."""

_NAME = re.compile(NAME_PATTERN)
_names_checked: set[str] = set()


def check_name(name: str) -> None:
    """Check that ``name`` is a name (:data:`NAME_PATTERN`, over the whole string: a trailing newline is refused
    too). A name seen valid before costs one set lookup (0.05 us), a new one the regular expression (0.4 us).

    Raises:
        ValueError: it is not. Raised from a wire header's ``__post_init__`` while decoding, msgspec reports it as
            a ``ValidationError`` (:class:`vcascade.core.protocol.wire.MalformedMessage` ``bad_fields``).
    """
    if name in _names_checked:
        return
    if _NAME.fullmatch(name) is None:
        raise ValueError(f"{name[:NAME_MAX_CHARS]!r} is not a name (letters, digits, _.-)")
    if len(_names_checked) < MAX_NAMES_REMEMBERED:
        _names_checked.add(name)  # a set's add is atomic: decoding threads may share the memory

"""pydantic validation errors of a deployment file as one-line messages: key path, bad value, what was expected.

pydantic reports where an error is as a location, e.g. ``("edges", "e1", "detector", "yolov8", "path")``; the
tag of a discriminated union (``yolov8``) is no key of the file, so :func:`describe` follows the schema from
:class:`~vcascade.core.schema.Deployment` down to drop exactly those parts (a camera named ``onnx`` keeps its
name) and to find the config class the failing key belongs to, whose ``key_notes`` may explain it better.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from vcascade.core.schema import KEY_PROBLEM, ConfigModel, Deployment

_FIXED_REASONS = {
    "missing": "missing (required)",
    "extra_forbidden": "unknown key (check its spelling; docs/CONFIG.md lists the allowed keys)",
}
"""pydantic error types whose message needs no value; a class's ``key_notes`` replace them for its keys."""


def describe(err: dict[str, Any]) -> str:
    """One line for one pydantic error (an item of ``ValidationError.errors()`` of :class:`Deployment`)."""
    loc, owner = locate(err["loc"])
    kind = err["type"]
    if kind in _FIXED_REASONS:
        note = owner.key_notes.get(loc[-1]) if owner is not None else None
        return f"{dotted(loc)}: {note or _FIXED_REASONS[kind]}"
    if kind == "union_tag_invalid":
        ctx = err["ctx"]
        key = ctx["discriminator"].strip("'")
        return f"{dotted((*loc, key))} = {ctx['tag']!r}: expected one of {ctx['expected_tags']}"
    if kind == KEY_PROBLEM:  # the schema's own checks (vcascade.core.schema.base.key_problem)
        ctx = err["ctx"]
        value = ctx["value"] if "value" in ctx else err["input"].get(ctx["key"])
        return f"{dotted((*loc, ctx['key']))} = {value!r}: {ctx['reason']}"
    return f"{dotted(loc)} = {_shown(err.get('input'))}: expected {_expected(err['msg'])}"


def dotted(loc: tuple[Any, ...]) -> str:
    """``("edges", "e1", "sinks", 0, "type")`` -> ``edges.e1.sinks[0].type``."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    return text or "(top level)"


def locate(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[ConfigModel] | None]:
    """A pydantic error location as the file's key path (union tags dropped), and the config class whose key
    the path ends with (None when it ends at a list index, a mapping's name or inside a plain value)."""
    path: list[Any] = []
    node: Any = Deployment
    owner = None
    for part in loc:
        node = _bare(node)
        members = _tagged_members(node)
        if part in members:
            node = members[part]
            continue
        owner = node if _is_config(node) else None
        path.append(part)
        node = _child(node, part)
    return tuple(path), owner


def _shown(value: Any) -> str:
    """The bad value as the message shows it: its repr, or its type name for a long mapping or list."""
    return repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 60 else type(value).__name__


def _expected(msg: str) -> str:
    """pydantic's message as what was expected: ``Input should be X`` -> ``X``, ``Less than 2`` -> ``a value
    less than 2``."""
    expected = msg.removeprefix("Input should be ") if msg.startswith("Input should be ") else msg[0].lower() + msg[1:]
    return "a value " + expected if expected.startswith(("less than", "greater than")) else expected


def _is_config(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, ConfigModel)


def _is_union(node: Any) -> bool:
    return get_origin(node) in (Union, types.UnionType)


def _bare(node: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; ``X | None`` -> ``X`` (pydantic adds no location part for either)."""
    while get_origin(node) is Annotated:
        node = get_args(node)[0]
    if _is_union(node):
        members = [arg for arg in get_args(node) if arg is not type(None)]
        if len(members) == 1:
            return _bare(members[0])
    return node


def _tagged_members(node: Any) -> dict[Any, type[ConfigModel]]:
    """``{tag: class}`` of a union of config classes told apart by their ``type`` key; ``{}`` for other types."""
    members: dict[Any, type[ConfigModel]] = {}
    for arg in get_args(node) if _is_union(node) else ():
        cls = _bare(arg)
        if _is_config(cls) and "type" in cls.model_fields:
            members.update(dict.fromkeys(get_args(cls.model_fields["type"].annotation), cls))
    return members


def _child(node: Any, part: Any) -> Any:
    """The type found at ``part`` inside ``node``: a config class's field, a mapping's value, a list's item."""
    if _is_config(node):
        field = node.model_fields.get(part)
        return field.annotation if field is not None else None
    if get_origin(node) is dict:
        return get_args(node)[1]
    if get_origin(node) is list:
        return get_args(node)[0]
    return None

"""Building blocks of the deployment schema: the frozen base model, names and ports, the thread fields several
processes share, and the ``type`` key that picks a backend's config class.

A user error the schema finds beyond pydantic's own checks is a :func:`key_problem`: the key it is about, the
bad value and the reason, which :mod:`vcascade.core.config` prints as one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Union, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

from vcascade.core.names import NAME_PATTERN

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Port = Annotated[int, Field(ge=1, le=65535)]

KEY_PROBLEM = "key_problem"
"""pydantic error type of :func:`key_problem` (and of an unknown ``type`` of a :func:`type_discriminator` union)."""


class ConfigModel(BaseModel):
    """Base of every config section: unknown keys are errors, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key_notes: ClassVar[Mapping[str, str]] = {}
    """Message for a key of this section that is missing or unknown, instead of pydantic's generic one."""


def key_problem(key: str, value: Any, reason: str) -> PydanticCustomError:
    """The error a validator raises for one key of its section: ``{section}.{key} = {value!r}: {reason}``."""
    return PydanticCustomError(KEY_PROBLEM, "{reason}", {"key": key, "value": value, "reason": reason})


def type_discriminator(default: str, tags: Sequence[str]) -> Discriminator:
    """Picks a union member by the ``type`` key, ``default`` when the key is omitted; an unknown type is reported
    on the ``type`` key like a ``Literal`` field (``expected 'a', 'b' or 'c'``).

    Args:
        default: the tag of the member used when ``type`` is omitted.
        tags: every member's tag, in the union's order (each member is ``Annotated[Class, Tag(tag)]``).
    """

    def type_of(value: Any) -> Any:
        return value.get("type", default) if isinstance(value, dict) else getattr(value, "type", default)

    expected = ", ".join(repr(tag) for tag in tags[:-1]) + f" or {tags[-1]!r}"
    return Discriminator(
        type_of, custom_error_type=KEY_PROBLEM, custom_error_message=f"Input should be {expected}",
        custom_error_context={"key": "type", "reason": f"expected {expected}"},
    )


def family_tag(member: type[ConfigModel]) -> str:
    """The ``type`` of a backend's config class: the one value of its ``type: Literal[...]`` field, the only place
    a backend family's name is written in the schema.

    Raises:
        TypeError: the class has no ``type`` field of one literal value.
    """
    field = member.model_fields.get("type")
    tags = get_args(field.annotation) if field is not None else ()
    if len(tags) != 1 or not isinstance(tags[0], str):
        raise TypeError(f"{member.__name__}: a backend config class needs a `type: Literal['name']` field")
    return tags[0]


def family_union(members: Sequence[type[ConfigModel]], default: type[ConfigModel]) -> Any:
    """The discriminated union of a registry of backend config classes, tagged by each one's :func:`family_tag`
    and picked by :func:`type_discriminator` (``default``'s family when ``type`` is omitted).

    Args:
        members: the config classes, in the order errors list their types.
        default: the member used when the ``type`` key is omitted.

    Raises:
        ValueError: two members share a ``type``, or ``default`` is not a member.
    """
    tags = [family_tag(member) for member in members]
    if len(set(tags)) != len(tags) or default not in members:
        raise ValueError(f"backend types {tags}: each once, default {default.__name__} among them")
    tagged = tuple(Annotated[member, Tag(tag)] for member, tag in zip(members, tags))
    return Annotated[Union[tagged], type_discriminator(family_tag(default), tags)]


# ---------------------------------------------------------------- threads (vcascade/core/runtime/threads.py)


def cpus_field() -> Any:
    """``cpus``: the cores a process is given, from which its thread defaults derive."""
    return Field(
        None, ge=1, le=4096,
        description="Cores this process is given; thread defaults derive from it (None: its CPU affinity, capped by "
        "its cgroup CPU quota; docs/USAGE.md, 'Commands': threads).",
    )


def torch_threads_field() -> Any:
    """``torch_threads`` of a worker or stage group."""
    return Field(None, ge=1, le=256, description="torch threads of each stage thread (None: `cpus // stages`, at least 1).")


def spinning_field() -> Any:
    """``allow_spinning`` of an ONNX Runtime session."""
    return Field(False, description="Let idle ONNX Runtime threads busy-wait (lower latency, burns the cores others share).")


# ---------------------------------------------------------------- model files (vcascade/core/runtime/models.py)


MODEL_SEARCH = "--model-dir, $VCASCADE_MODEL_DIR, then the user cache (~/.cache/vcascade/models)"
"""Where a model named by its file name is looked for, in order
(:func:`vcascade.core.runtime.models.model_search_dirs`)."""


def model_file_field(default: Any, what: str, *, package: bool = False, fetch: str | None = None) -> Any:
    """A key naming a model file (``default``; ``...``: required), described as ``what`` the file is, then where it
    may be (:data:`MODEL_SEARCH`), and with ``fetch`` the ``python -m tools.fetch_models`` flag that gets it.
    ``package``: the key also takes ``package://<distribution>/<file>``."""
    packaged = "package://<distribution>/<file>, " if package else ""
    fetched = f"; `python -m tools.fetch_models --{fetch}` fetches it" if fetch else ""
    where = f"an absolute path, {packaged}or a file name searched in {MODEL_SEARCH}"
    return Field(default, description=f"{what}: {where}{fetched}.")

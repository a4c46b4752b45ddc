"""Lazy re-exports for package ``__init__`` modules (PEP 562 module ``__getattr__``).

Each package names its public API in its ``__init__`` without importing it: ``from vcascade.center import
run_worker`` imports ``vcascade.center.worker`` (and torch) at that moment, while ``import
vcascade.center.stages.balance`` loads only the balancer. This keeps importing a pure module cheap (no torch, OpenCV
or ONNX Runtime) while the public names stay one import away.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``__getattr__`` and ``__dir__`` from ``{public name: defining module}``.

    Args:
        package: the package's ``__name__``.
        names: each public name mapped to the module (absolute, or relative to ``package`` when it starts with
            ``.``) that defines it.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's module level. ``__getattr__`` imports the defining
        module on first access and raises ``AttributeError`` for names not in ``names``.
    """

    def __getattr__(name: str) -> Any:
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__

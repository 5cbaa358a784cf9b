"""Public names of a package loaded on first use (PEP 562), so importing a light submodule does
not load the heavy ones (NumPy, the engines).

A package lists ``{public name: its submodule}`` and takes the two module functions::

    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, names: Mapping[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` (imports ``package.<submodule>`` for a listed name and keeps the value in
    ``namespace``, so the next access is a plain lookup) and ``__dir__`` for ``package``."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_

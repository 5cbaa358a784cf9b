"""The local backend: every table and slot a NumPy array of this process (``LocalStorage``).

``LOCAL`` opens it (``storage.BACKENDS["local"]``): the memory check of the run's tables, slots
and step against ``max_memory`` (``memory.require_memory``; skipped with ``check_memory=False``),
the tables whose initializer is a Python callable called once, and the initial state, whose
default rows are computed when first touched (``state.Pending``). :func:`custom_backend` makes a
backend of a storage factory ``fn(plan, arrays, engine)`` (every initial value computed up
front).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from .engines import Engine
from .hooks import RunHooks
from .initial import called_tables, initial_state
from .memory import library_estimate, reduce_hint, require_memory
from .plan import Plan
from .storage import (
    BasicStorage,
    LocalStorage,
    RowStorage,
    Storage,
    StorageRequest,
    refuse_settings,
)

__all__ = ["LOCAL", "LocalBackend", "custom_backend"]

#: ``fn(plan, arrays, engine)``: a storage of the initial ``arrays`` (state-file keys).
StorageFactory = Callable[[Plan, dict[str, np.ndarray], Engine], RowStorage]


@dataclass(frozen=True)
class LocalBackend(RunHooks):
    """Tables in this process, in the storage ``factory`` makes (default ``LocalStorage``; a
    factory's storage, which offers the calls of ``RowStorage``, is reached through
    ``BasicStorage``)."""

    factory: StorageFactory | None = None
    name: str = "local"

    @property
    def in_process(self) -> bool:
        return True

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """No error of its own."""
        return ()

    def settings(self, given: Mapping[str, Any]) -> None:
        """No setting of its own: every one given is refused."""
        refuse_settings(self.name, list(given))

    def session(self, options: object | None) -> AbstractContextManager[None]:
        """Nothing to connect to."""
        return nullcontext()

    def open(self, request: StorageRequest) -> Storage:
        if request.backend_options is not None:
            raise UsageError(f"{type(request.backend_options).__name__}: options of another "
                             f"backend, not used by backend={self.name!r}; remove them")
        plan, options = request.plan, request.options
        if options.check_memory:
            parts = library_estimate(plan, request.engine.name)
            require_memory(parts.total, options.memory_limit, reduce=reduce_hint(parts))
        given = called_tables(plan, request.given, request.source)
        # LocalStorage computes default rows when first touched (``state.Pending``); another
        # storage gets every value up front.
        arrays = initial_state(plan, given, options.seed, request.source, request.strict,
                               lazy=self.factory is None)
        if self.factory is None:
            return LocalStorage(plan, arrays, request.engine)
        return BasicStorage(self.factory(plan, arrays, request.engine), plan)


LOCAL = LocalBackend()


def custom_backend(factory: StorageFactory) -> LocalBackend:
    """The local backend with the storage ``factory`` makes (``LocalStorage``: the default)."""
    return LOCAL if factory is LocalStorage else LocalBackend(factory, "local")

"""Where a Python spec built each object: the line and column of the call in the spec file.

While a spec runs under :func:`recording`, the constructors of ``TableConfig``, ``FeatureConfig``
and every optimizer call :func:`record`, which notes the innermost place of the spec file on the
call stack (a table built by a helper function of the spec is placed at the helper's call that
built it). ``tpuemb validate`` and ``tpuemb inspect`` of a spec place their findings there
(:mod:`tpuemb_cfg.spec_check`). Outside :func:`recording` a constructor pays one context-variable
lookup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Origins", "record", "recording"]


class Origins:
    """The place (1-based line and column) of each object built while recording."""

    def __init__(self, path: str) -> None:
        self.files = {path, os.path.realpath(path)}
        # id -> (object, line, column): the object is kept, so its id is never reused meanwhile.
        self._sites: dict[int, tuple[Any, int, int]] = {}

    def place(self, obj: Any) -> tuple[int, int] | None:
        """Where ``obj`` was built in the spec, or ``None``."""
        site = self._sites.get(id(obj))
        return (site[1], site[2]) if site is not None and site[0] is obj else None

    def add(self, obj: Any, line: int, column: int) -> None:
        self._sites.setdefault(id(obj), (obj, line, column))


_ACTIVE: ContextVar[Origins | None] = ContextVar("tpuemb_spec_origins", default=None)


def record(obj: Any) -> None:
    """Note where ``obj`` is being built, when a spec is being recorded."""
    origins = _ACTIVE.get()
    if origins is None:
        return
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename in origins.files:
            line, column = frame.f_lineno, 1
            positions = list(code.co_positions())
            index = frame.f_lasti // 2
            if 0 <= index < len(positions):
                start_line, _, start_column, _ = positions[index]
                if start_line is not None and start_column is not None:
                    line, column = start_line, start_column + 1
            origins.add(obj, line, column)
            return
        frame = frame.f_back  # type: ignore[assignment]


@contextmanager
def recording(path: str) -> Iterator[Origins]:
    """Record, while the block runs, where the spec file ``path`` builds each object."""
    origins = Origins(path)
    token = _ACTIVE.set(origins)
    try:
        yield origins
    finally:
        _ACTIVE.reset(token)

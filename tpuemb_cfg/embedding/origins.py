"""Where a Python spec built each object: the line and column of the call in the spec file.

While a spec runs under :func:`recording`, the constructors of ``TableConfig``, ``FeatureConfig``
and every optimizer call :func:`record`, which notes the innermost place of the spec file on the
call stack (a table built by a helper function of the spec is placed at the helper's call that
built it). ``tpuemb validate`` and ``tpuemb inspect`` of a spec place their findings there
(:mod:`tpuemb_cfg.spec_check`). Outside :func:`recording` a constructor pays one context-variable
lookup.

Objects of other libraries (keras-rs' ``TableConfig`` and ``FeatureConfig``, which tpuemb never
imports) cannot call :func:`record`: while a spec runs, :func:`recording` given a ``foreign``
test also notes where the spec file calls any ``__init__`` (a trace function that looks at
calls only, chained to one already installed, such as a coverage tool's), and keeps the places
of the objects that pass the test (keras-rs' objects: :mod:`tpuemb_cfg.spec_check`). What
tpuemb builds from such an object while the configuration is compiled
(:mod:`~tpuemb_cfg.embedding.keras_rs`) takes its place (:func:`derive`, under
:func:`deriving`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import Any

__all__ = ["Origins", "derive", "deriving", "record", "recording"]


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


def _position(frame: FrameType) -> tuple[int, int]:
    """The 1-based line and column of the call ``frame`` is making."""
    code = frame.f_code
    line, column = frame.f_lineno, 1
    positions = list(code.co_positions())
    index = frame.f_lasti // 2
    if 0 <= index < len(positions):
        start_line, _, start_column, _ = positions[index]
        if start_line is not None and start_column is not None:
            line, column = start_line, start_column + 1
    return line, column


def record(obj: Any) -> None:
    """Note where ``obj`` is being built, when a spec is being recorded."""
    origins = _ACTIVE.get()
    if origins is None:
        return
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in origins.files:
            origins.add(obj, *_position(frame))
            return
        frame = frame.f_back  # type: ignore[assignment]


def derive(obj: Any, source: Any) -> None:
    """``obj`` was made from ``source`` (a keras-rs object): it takes ``source``'s place, when
    one is recorded (:func:`deriving`)."""
    origins = _ACTIVE.get()
    if origins is None:
        return
    place = origins.place(source)
    if place is not None:
        origins.add(obj, *place)


def _tracer(origins: Origins, previous: Any, built: list[tuple[Any, int, int]]) -> Any:
    """A trace function that notes ``(self, line, column)`` of every ``__init__`` the spec
    file calls, then hands the event to ``previous`` (the trace function it replaced)."""

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_name == "__init__":
            caller = frame.f_back
            code = frame.f_code
            if (caller is not None and caller.f_code.co_filename in origins.files
                    and code.co_argcount):
                obj = frame.f_locals.get(code.co_varnames[0])
                if obj is not None:
                    built.append((obj, *_position(caller)))
        return previous(frame, event, arg) if previous is not None else None

    return trace


@contextmanager
def recording(path: str, foreign: Callable[[Any], bool] | None = None) -> Iterator[Origins]:
    """Record, while the block runs, where the spec file ``path`` builds each object: tpuemb's
    own (:func:`record`) and, when ``foreign`` is given, every object the spec file calls
    ``__init__`` of for which ``foreign(obj)`` holds once the block has run (keras-rs'
    ``TableConfig`` and ``FeatureConfig``: ``keras_rs.is_table``, ``is_feature``)."""
    origins = Origins(path)
    token = _ACTIVE.set(origins)
    built: list[tuple[Any, int, int]] = []
    previous = sys.gettrace()
    if foreign is not None:
        sys.settrace(_tracer(origins, previous, built))
    try:
        yield origins
    finally:
        if foreign is not None:
            sys.settrace(previous)
        _ACTIVE.reset(token)
        for obj, line, column in built:
            try:
                kept = foreign is not None and foreign(obj)
            except Exception:  # noqa: BLE001 - a spec's object whose attributes raise
                kept = False
            if kept:
                origins.add(obj, line, column)


@contextmanager
def deriving(origins: Origins) -> Iterator[None]:
    """While the block runs, :func:`derive` places objects with ``origins`` (compiling a spec
    recorded by :func:`recording`)."""
    token = _ACTIVE.set(origins)
    try:
        yield
    finally:
        _ACTIVE.reset(token)

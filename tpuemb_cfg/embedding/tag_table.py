"""The tag table of a compiled spec: which tables each dynamic learning-rate input feeds.

``tpuemb compile`` prints it and writes it as a comment at the top of a text configuration, so
a reader sees which callable feeds which tag (``docs/compile.md``).
"""

from __future__ import annotations

import os
from typing import Any

from tpuemb_cfg.base.errors import printable
from tpuemb_cfg.embedding.keras import KerasSchedule
from tpuemb_cfg.embedding.schedules import Schedule

__all__ = ["describe_callable", "tag_table_lines"]


def describe_callable(fn: Any) -> str:
    """A short, stable description of a dynamic learning rate for tag tables.

    A :class:`~tpuemb_cfg.embedding.schedules.Schedule` or a
    :class:`~tpuemb_cfg.embedding.keras.KerasSchedule` shows its name and formula; a function or
    bound method its qualified name and where it is defined (file name and line).
    """
    if isinstance(fn, Schedule | KerasSchedule):
        return f"{fn.name} = {fn.describe()}"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    if code is not None:
        return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    return f"{name} object"


def tag_table_lines(compiled: Any) -> list[str]:
    """``tag k -> tables a, b -> schedule`` for every dynamic input of a compiled spec; each
    line printable (:func:`~tpuemb_cfg.base.errors.printable`: it is also a comment line of the
    compiled file, which a line break in a table name would end)."""
    if not compiled.dynamic_learning_rates:
        return ["dynamic learning rates: none (every table has a constant learning rate)"]
    k = len(compiled.dynamic_learning_rates)
    lines = [
        f"dynamic learning rates: {k} (send [lr() for lr in dynamic_learning_rates] every step; "
        f"position k feeds tag k)"
    ]
    for tag, (fn, uses) in enumerate(
        zip(compiled.dynamic_learning_rates, compiled.tag_uses, strict=True)
    ):
        tables = ", ".join(
            u.table + (" (step counter)" if u.argument == "step_counter" else "") for u in uses
        )
        lines.append(printable(f"  tag {tag} -> {tables} -> {describe_callable(fn)}"))
    return lines

"""TensorFlow's stacking group of a SparseCore table, as a string that is the same on every run.

TensorFlow keys a table's group with
``"_xxtpuv3internal_" + sha1(repr((hash(optimizer), repr(quantization_config))))`` where
``hash(optimizer)`` is ``hash(tuple(optimizer.__dict__.items()))``. That hash depends on
``PYTHONHASHSEED`` (the dict's keys are strings), so TensorFlow's group strings, and the output
order of same-width stacks whose optimizers differ, change from process to process. tpuemb keeps
TensorFlow's *grouping* and makes the string reproducible: the optimizer's attribute dict is
written out in a canonical form (:func:`optimizer_key`: numbers that hash equal are written
equal, a callable - a learning-rate schedule - by its first appearance among the configuration's
callables, so the same object shares a group and distinct objects never do), and the string is
``"_xxtpuv3internal_" + sha1(repr((key, repr(quantization_config))))``. Two tables share a tpuemb
group exactly when they share a TensorFlow group; the strings, and so the order of stacks that
differ only in group, are tpuemb's own but the same on every run and machine.

:mod:`tpuemb_cfg.embedding.sparsecore` keys every table it converts with :func:`group_key`.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["GROUP_PREFIX", "CallableNumbers", "group_key", "optimizer_key"]

#: The prefix of TensorFlow's group strings (tpu_embedding_v3.py).
GROUP_PREFIX = "_xxtpuv3internal_"


class CallableNumbers:
    """Numbers the callables of a configuration by first appearance (identity), so that a
    group key names a learning-rate schedule without ``id()`` (which differs between runs)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int]] = {}

    def number(self, value: Any) -> int:
        entry = self._seen.get(id(value))
        if entry is None:
            entry = (value, len(self._seen))
            self._seen[id(value)] = entry
        return entry[1]


def _canonical(value: Any, callables: CallableNumbers) -> str:
    """``value`` written so that two values TensorFlow's hash treats as equal (``1``, ``1.0`` and
    ``True``) are written alike, and a callable (or another object known only by its address)
    by its number in ``callables``: the text never holds an address."""
    if callable(value):
        return f"<callable {callables.number(value)}>"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):  # bool too; equal to a float exactly when it hashes like it
        try:
            as_float = float(value)
        except OverflowError:
            return repr(int(value))
        return repr(as_float) if as_float == value else repr(int(value))
    if isinstance(value, tuple | list):
        inner = ", ".join(_canonical(v, callables) for v in value)
        return f"({inner})"
    text = repr(value)
    if " at 0x" in text:  # an object shown by its address: hashed by identity, numbered
        return f"<{type(value).__name__} {callables.number(value)}>"
    return text


def optimizer_key(optimizer: Any, callables: CallableNumbers | None = None) -> str:
    """The optimizer's attribute dict, in definition order, written canonically: what
    TensorFlow's ``hash(tuple(optimizer.__dict__.items()))`` tells apart, without the hash
    seed. The class is not part of it (TensorFlow hashes only the dict)."""
    numbering = callables if callables is not None else CallableNumbers()
    items = ", ".join(f"{name}={_canonical(value, numbering)}"
                      for name, value in vars(optimizer).items())
    return f"({items})"


def group_key(optimizer: Any, quantization_config: Any,
              callables: CallableNumbers | None = None) -> str:
    """tpuemb's reproducible stand-in for TensorFlow's group string (module docstring)."""
    text = repr((optimizer_key(optimizer, callables), repr(quantization_config)))
    return GROUP_PREFIX + hashlib.sha1(text.encode("utf-8")).hexdigest()

"""Shapes without TensorFlow: ``None`` (unknown rank) or a tuple of ints and ``None`` dimensions.

TensorFlow passes ``tf.TensorShape`` objects; the project accepts plain Python values wherever a
shape is expected:

- ``None``: unknown rank (counts as "not set" for ``FeatureConfig.output_shape``);
- a list or tuple of ints (and ``None`` for an unknown dimension), ``[]`` included (rank 0), or
  any other iterable of them except a string (a NumPy array, a generator);
- an int n: the one-dimensional shape ``[n]`` (as ``tf.TensorShape(n)``);
- any object with ``as_list()`` (a ``tf.TensorShape``): its list, or unknown rank when
  ``as_list`` raises ``ValueError`` (TensorFlow's behaviour for unknown ranks).

A dimension is anything with ``__index__`` (``True`` is a dimension of 1, as in TensorFlow;
``numpy.int64`` too); a float, a string or a negative number is refused as ``TensorShape``
refuses it (``TypeError``, negative: ``ValueError``).
"""

from __future__ import annotations

import operator
from typing import Any

from tpuemb_cfg.embedding._checks import fail, fail_type, show

#: A shape: ``None`` is an unknown rank, ``None`` entries are unknown dimensions.
Shape = tuple[int | None, ...] | None


def is_shape_like(value: Any) -> bool:
    """Whether ``value`` reads as a whole shape (used to tell shapes from lists of shapes): a
    list or tuple of dimensions, not of lists, tuples or dicts. Its dimensions are checked when
    it is converted (:func:`to_shape`), so ``[16, 2.5]`` is a shape with a wrong dimension (a
    ``TypeError``, as ``TensorShape`` raises), not a structure that fails to match."""
    if value is None or hasattr(value, "as_list"):
        return True
    if isinstance(value, list | tuple):
        return not any(isinstance(d, list | tuple | dict) for d in value)
    return False


def _is_int(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def to_shape(value: Any, owner: str, name: str) -> Shape:
    """Convert ``value`` to a :data:`Shape`; a negative dimension is an error (CTOR021)."""
    if value is None:
        return None
    if hasattr(value, "as_list"):
        try:
            value = value.as_list()
        except ValueError:
            return None
    if _is_int(value):
        value = [value]
    if not isinstance(value, list | tuple | str | bytes) and hasattr(value, "__iter__"):
        value = list(value)
    if not isinstance(value, list | tuple):
        raise fail_type(
            owner,
            f"`{name}` must be a shape (a list of ints, None for an unknown dimension) or None; "
            f"received {show(value)}",
        )
    dims: list[int | None] = []
    for d in value:
        if d is None:
            dims.append(None)
            continue
        if not _is_int(d):
            raise fail_type(
                owner,
                f"`{name}` must be a list of ints (or None for an unknown dimension); "
                f"received {show(value)}, whose entry {show(d)} is not an int",
            )
        n = operator.index(d)
        if n < 0:
            raise fail(owner, f"`{name}` {format_shape(tuple(value))}: dimension {n} must be >= 0")
        dims.append(n)
    return tuple(dims)


def is_fully_defined(shape: Shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def shape_repr(shape: Shape) -> str:
    """The shape as TensorFlow prints a ``TensorShape``: ``TensorShape([16, None])``,
    ``TensorShape(None)`` for an unknown rank."""
    if shape is None:
        return "TensorShape(None)"
    return "TensorShape([" + ", ".join(repr(d) for d in shape) + "])"


def format_shape(shape: Shape) -> str:
    """``[16, None]`` style; ``<unknown>`` for an unknown rank."""
    if shape is None:
        return "<unknown>"
    return "[" + ", ".join("None" if d is None else show(d) for d in shape) + "]"

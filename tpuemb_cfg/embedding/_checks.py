"""Argument checks shared by the constructors: one place for the wording of every message.

Every message names the object and the argument, shows the value received and states what is
allowed: ``Adam: `beta_2` must be >= 0 and < 1; received 1.5``.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuemb_cfg.base.errors import shown
from tpuemb_cfg.embedding import pbvalues
from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError

#: A short ``repr`` of a received value for an error message: the package's one helper.
show = shown


def type_name(value: Any) -> str:
    return type(value).__name__


def fail(owner: str, message: str) -> EmbeddingConfigError:
    return EmbeddingConfigError(f"{owner}: {message}")


def fail_type(owner: str, message: str) -> EmbeddingTypeError:
    return EmbeddingTypeError(f"{owner}: {message}")


def is_real(value: Any) -> bool:
    """A number as TensorFlow's writer takes one (``True`` is 1.0, NumPy scalars count; strings
    do not): see :mod:`tpuemb_cfg.embedding.pbvalues`."""
    return pbvalues.is_number(value)


def real(owner: str, name: str, value: Any) -> float:
    """``value`` as a float; a non-number raises a type error naming ``name``."""
    return pbvalues.to_float(owner, name, value)


def number(owner: str, name: str, value: Any) -> Any:
    """Check that ``value`` is a number by its type, as a float field needs it; an int beyond
    float's range passes (it fails with an ``OverflowError`` when the configuration is written,
    where TensorFlow's protobuf fails)."""
    return pbvalues.check_number(owner, name, value)


def optional_number(owner: str, name: str, value: Any) -> Any:
    return None if value is None else number(owner, name, value)


def flag(owner: str, name: str, value: Any) -> bool:
    """A bool flag of a proto message, checked by its type as TensorFlow's writer takes it (a
    bool, or an int read as its truth value); its range is checked when written."""
    return bool(pbvalues.check_bool(owner, name, value))


def compared(owner: str, name: str, value: Any) -> float:
    """``value`` as TensorFlow's constructor compares it (``x <= 0``, ``0 <= x < 1``): an int
    beyond float's range is an infinity of its sign, a one-element NumPy array its number."""
    return pbvalues.compared(owner, name, value)


def integer(owner: str, name: str, value: Any, *, minimum: int | None = None) -> int:
    """``value`` as an int (``bool`` accepted, as TensorFlow's ``isinstance(v, int)`` does)."""
    try:
        number = operator.index(value)
    except TypeError:
        allowed = f"an int >= {minimum}" if minimum is not None else "an int"
        raise fail_type(
            owner, f"`{name}` must be {allowed}; received {show(value)} ({type_name(value)})"
        ) from None
    if minimum is not None and number < minimum:
        raise fail(owner, f"`{name}` must be an int >= {minimum}; received {show(value)}")
    return number


def boolean(owner: str, name: str, value: Any) -> bool:
    """A bool flag of a proto message, as TensorFlow's writer takes it: a bool, or an int read
    as its truth value (``2`` is True); floats, None and strings are refused."""
    return pbvalues.to_bool(owner, name, value)

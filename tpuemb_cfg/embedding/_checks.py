"""Argument checks shared by the constructors: one place for the wording of every message.

Every message names the object and the argument, shows the value received and states what is
allowed: ``Adam: `beta_2` must be >= 0 and < 1; received 1.5``.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError


def show(value: Any) -> str:
    """A short ``repr`` of a received value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_name(value: Any) -> str:
    return type(value).__name__


def fail(owner: str, message: str) -> EmbeddingConfigError:
    return EmbeddingConfigError(f"{owner}: {message}")


def fail_type(owner: str, message: str) -> EmbeddingTypeError:
    return EmbeddingTypeError(f"{owner}: {message}")


def is_real(value: Any) -> bool:
    """A real number that is not a ``bool`` (``True`` is rarely meant as 1.0)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def real(owner: str, name: str, value: Any) -> float:
    """``value`` as a float; a non-number raises a type error naming ``name``."""
    if not is_real(value):
        raise fail_type(
            owner, f"`{name}` must be a number; received {show(value)} ({type_name(value)})"
        )
    return float(value)


def optional_real(owner: str, name: str, value: Any) -> float | None:
    return None if value is None else real(owner, name, value)


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
    """A bool flag of a proto message (``True``/``False`` or the ints 0 and 1)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise fail_type(owner, f"`{name}` must be True or False; received {show(value)}")

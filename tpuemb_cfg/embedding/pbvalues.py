"""Python values as TensorFlow 2.21 puts them into its messages, on every protobuf runtime.

TensorFlow's writer assigns the user's objects to proto fields as they are (``params.adam.beta1 =
beta_1``); what a field accepts is then decided by the protobuf runtime. TensorFlow 2.21 writes
configurations only with protobuf 6 (with protobuf 7 its writer fails on every optimizer, see
docs/compatibility.md), so protobuf 6.31.1's rules are TensorFlow's rules. protobuf 7
is stricter (it refuses ``True`` for a number, for instance), so tpuemb converts every value
itself, with protobuf 6's rules, before assigning it:

- float, double and wrapper fields take bool, int, float, NumPy scalars, anything with
  ``__float__`` or ``__index__`` (stored as ``float(v)``: ``True`` is 1.0); str, bytes, None,
  lists and NumPy arrays (even 0-d ones: protobuf refuses any type named ``ndarray``) raise
  ``TypeError``; an int beyond float's range (``10**400``) raises ``OverflowError``;
- bool fields take bool, int, NumPy integers and anything with ``__index__``, as its truth value
  (2 is True); float, ``numpy.bool_``, NumPy arrays, str and None raise ``TypeError``, an int
  outside the 64-bit range ``OverflowError`` (protobuf reads it as a C ``long`` first);
- int32 and int64 fields take the same integers (``True`` is 1) and 0-d integer NumPy arrays;
  a number out of range raises ``ValueError``, anything else ``TypeError``;
- enum fields (open, proto3) take those integers, also numbers the enum does not name, and the
  name of a value (``"ENABLED"``); an unknown name or a number out of range raises
  ``ValueError``, float and None ``TypeError``;
- string fields take str, and bytes holding UTF-8; anything else raises ``TypeError``.

Every refusal raises :class:`EmbeddingTypeError` (a ``TypeError``, also a ``ValueError``),
:class:`EmbeddingOverflowError` (an ``OverflowError``, also a ``ValueError``) or
:class:`EmbeddingConfigError` (a ``ValueError``), naming the owner and the argument.

TensorFlow's constructors only compare some numbers (``initial_accumulator_value <= 0``,
``0 <= beta_1 < 1``) and never write them, or write them later; :func:`compared` gives the value
such a comparison sees: an int beyond float's range compares like an infinity of its sign, and
a NumPy array of one number like that number.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.base.errors import shown
from tpuemb_cfg.embedding.errors import (
    EmbeddingConfigError,
    EmbeddingOverflowError,
    EmbeddingTypeError,
)

#: A short ``repr`` of a received value for an error message: the package's one helper.
show = shown

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _is_ndarray(value: Any) -> bool:
    """protobuf 6 refuses, for number and bool fields, any value whose type is named
    ``ndarray`` (a NumPy array, 0-d included), before trying to convert it."""
    return type(value).__name__ == "ndarray"


def _integer(value: Any) -> int | None:
    """``value`` as protobuf 6 reads an integer (``__index__``; not ``numpy.bool_``)."""
    if isinstance(value, bool):
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        return None


def is_number(value: Any) -> bool:
    """Whether a float field accepts ``value`` by its type (``True`` and ``numpy.float32(1)``
    included; an int beyond float's range is a number, too large: :func:`to_float` says so)."""
    if value is None or isinstance(value, str | bytes | bytearray | complex) or _is_ndarray(value):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    except (TypeError, ValueError):
        return False
    return True


def _not_a_number(owner: str, name: str, value: Any) -> EmbeddingTypeError:
    if _is_ndarray(value):
        return EmbeddingTypeError(
            f"{owner}: `{name}` must be a number, not a NumPy array (protobuf refuses arrays, "
            f"even 0-d ones); received {show(value)}: pass float(x) or x.item()"
        )
    return EmbeddingTypeError(
        f"{owner}: `{name}` must be a number; received {show(value)} ({type(value).__name__})"
    )


def check_number(owner: str, name: str, value: Any) -> Any:
    """``value`` unchanged when a float field accepts its type; an int beyond float's range
    passes here and fails when written (:func:`to_float`), where protobuf fails."""
    if not is_number(value):
        raise _not_a_number(owner, name, value)
    return value


def to_float(owner: str, name: str, value: Any) -> float:
    """What a float field stores for ``value`` (before its rounding to float32)."""
    if not is_number(value):
        raise _not_a_number(owner, name, value)
    try:
        return float(value)
    except OverflowError:
        raise EmbeddingOverflowError(
            f"{owner}: `{name}` {show(value)} is beyond the range of a float (about "
            f"+-1.8e308; the proto keeps a float32, +-3.4e38): pass a number in range, or "
            f"float('inf') if infinity is meant"
        ) from None


def compared(owner: str, name: str, value: Any) -> float:
    """The number a TensorFlow constructor compares for ``value`` (``x <= 0``, ``0 <= x < 1``):
    a float, ``+-inf`` for an int beyond float's range, the number a one-element NumPy array
    holds. Anything else raises :class:`EmbeddingTypeError`."""
    if _is_ndarray(value) and getattr(value, "size", 0) == 1:
        value = value.item()
    if not is_number(value):
        raise _not_a_number(owner, name, value)
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_bool(owner: str, name: str, value: Any) -> int:
    """The integer a bool field reads ``value`` as, checking its type only (the 64-bit range is
    checked when the field is written, :func:`to_bool`, where protobuf checks it)."""
    number = None if _is_ndarray(value) else _integer(value)
    if number is None:
        what = "a NumPy array" if _is_ndarray(value) else type(value).__name__
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be True or False (or an int, read as its truth value); "
            f"received {show(value)} ({what})"
        )
    return number


def to_bool(owner: str, name: str, value: Any) -> bool:
    """What a bool field stores: the truth value of an integer (``2`` is ``True``)."""
    number = check_bool(owner, name, value)
    low, high = INT64
    if not low <= number <= high:
        raise EmbeddingOverflowError(
            f"{owner}: `{name}` {show(value)} is beyond the 64-bit integer protobuf reads a "
            f"flag as; pass True or False"
        )
    return bool(number)


def check_int(owner: str, name: str, value: Any) -> int:
    """The integer an int field reads ``value`` as, checking its type only (the range is checked
    when the field is written, :func:`to_int`)."""
    number = _integer(value)
    if number is None:
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be an int; received {show(value)} ({type(value).__name__})"
        )
    return number


def to_int(owner: str, name: str, value: Any, bits: int = 32) -> int:
    """What an int32 (``bits=32``) or int64 field stores."""
    number = check_int(owner, name, value)
    low, high = INT32 if bits == 32 else INT64
    if not low <= number <= high:
        raise EmbeddingConfigError(
            f"{owner}: `{name}` {show(number)} does not fit the proto's int{bits} field "
            f"({low} to {high})"
        )
    return number


def check_enum(owner: str, name: str, value: Any, names: Mapping[str, int]) -> None:
    """Check the type an enum field needs (a name or an integer); an unknown name or a number
    beyond int32 is found when the field is written (:func:`to_enum`), as protobuf finds it."""
    if not isinstance(value, str) and _integer(value) is None:
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be an enum number or name ({', '.join(names)}); received "
            f"{show(value)} ({type(value).__name__})"
        )


def to_enum(owner: str, name: str, value: Any, names: Mapping[str, int]) -> int:
    """What an (open, proto3) enum field stores: an int32 number or the number of a name."""
    if isinstance(value, str):
        if value not in names:
            raise EmbeddingConfigError(
                f"{owner}: `{name}` {value!r} is not a value of the enum; use one of "
                f"{', '.join(names)} (or its number)"
            )
        return names[value]
    if _integer(value) is None:
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be an enum number or name ({', '.join(names)}); received "
            f"{show(value)} ({type(value).__name__})"
        )
    return to_int(owner, name, value)


def to_str(owner: str, name: str, value: Any) -> str:
    """What a string field stores: a str, or bytes holding UTF-8."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise EmbeddingConfigError(
                f"{owner}: `{name}` {show(value)} is not valid UTF-8"
            ) from None
    raise EmbeddingTypeError(
        f"{owner}: `{name}` must be a str; received {show(value)} ({type(value).__name__})"
    )

"""Python values as TensorFlow 2.21 puts them into its messages, on every protobuf runtime.

TensorFlow's writer assigns the user's objects to proto fields as they are (``params.adam.beta1 =
beta_1``); what a field accepts is then decided by the protobuf runtime. TensorFlow 2.21 writes
configurations only with protobuf 6 (with protobuf 7 its writer fails on every optimizer, see the
README's Compatibility section), so protobuf 6.31.1's rules are TensorFlow's rules. protobuf 7
is stricter (it refuses ``True`` for a number, for instance), so tpuemb converts every value
itself, with protobuf 6's rules, before assigning it:

- float, double and wrapper fields take bool, int, float, NumPy numbers, anything with
  ``__float__`` or ``__index__`` (stored as ``float(v)``: ``True`` is 1.0); str, bytes, None and
  lists raise ``TypeError``;
- bool fields take bool, int, NumPy integers and anything with ``__index__``, as its truth value
  (2 is True); float, ``numpy.bool_``, str and None raise ``TypeError``;
- int32 and int64 fields take the same integers (``True`` is 1); a number out of range raises
  ``ValueError``, anything else ``TypeError``;
- enum fields (open, proto3) take those integers, also numbers the enum does not name, and the
  name of a value (``"ENABLED"``); an unknown name or a number out of range raises
  ``ValueError``, float and None ``TypeError``;
- string fields take str, and bytes holding UTF-8; anything else raises ``TypeError``.

Every refusal raises :class:`EmbeddingTypeError` (a ``TypeError``, also a ``ValueError``) or
:class:`EmbeddingConfigError` (a ``ValueError``), naming the owner and the argument.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _integer(value: Any) -> int | None:
    """``value`` as protobuf 6 reads an integer (``__index__``; not ``numpy.bool_``)."""
    if isinstance(value, bool):
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        return None


def is_number(value: Any) -> bool:
    """Whether a float field accepts ``value`` (``True`` and ``numpy.float32(1)`` included)."""
    if value is None or isinstance(value, str | bytes | bytearray | complex):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def to_float(owner: str, name: str, value: Any) -> float:
    """What a float field stores for ``value`` (before its rounding to float32)."""
    if not is_number(value):
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be a number; received {_show(value)} "
            f"({type(value).__name__})"
        )
    return float(value)


def to_bool(owner: str, name: str, value: Any) -> bool:
    """What a bool field stores: the truth value of an integer (``2`` is ``True``)."""
    number = _integer(value)
    if number is None:
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be True or False (or an int, read as its truth value); "
            f"received {_show(value)} ({type(value).__name__})"
        )
    return bool(number)


def to_int(owner: str, name: str, value: Any, bits: int = 32) -> int:
    """What an int32 (``bits=32``) or int64 field stores."""
    number = _integer(value)
    if number is None:
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be an int; received {_show(value)} ({type(value).__name__})"
        )
    low, high = INT32 if bits == 32 else INT64
    if not low <= number <= high:
        raise EmbeddingConfigError(
            f"{owner}: `{name}` {number} does not fit the proto's int{bits} field "
            f"({low} to {high})"
        )
    return number


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
            f"{_show(value)} ({type(value).__name__})"
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
                f"{owner}: `{name}` {_show(value)} is not valid UTF-8"
            ) from None
    raise EmbeddingTypeError(
        f"{owner}: `{name}` must be a str; received {_show(value)} ({type(value).__name__})"
    )

"""The numbers users type: one grammar for sizes and one for seeds, wherever they are given.

Every size (``--max-memory``, ``TPUEMB_MAX_INPUT``, ``memory-budget`` in ``[tool.tpuemb]``,
``max_memory=`` in Python) goes through :func:`parse_size`, every seed (``--seed`` of
``simulate`` and ``bench``, ``seed`` of a simulation spec, ``seed=`` in Python) through
:func:`parse_seed`, and every byte count shown to a user through :func:`format_size`.

**Sizes** are bytes: a whole number (``268435456``), or a number with a unit (``512M``, ``1.5G``,
``2GiB``, ``16 GB``). Units are binary and case-insensitive: ``K`` = 2^10, ``M`` = 2^20,
``G`` = 2^30, ``T`` = 2^40, written ``K``, ``KiB`` or ``KB`` alike (``KB`` is read as KiB, as
memory tools and ``TPUEMB_MAX_INPUT`` always read it; write plain bytes for an exact decimal
size). A fraction is rounded down to whole bytes. A size is at least 1 byte and at most
:data:`MAX_SIZE`; a Python ``int`` is taken as bytes; anything else (a bool, a float, an
exponent such as ``1e9``) is refused, naming what was found.

**Seeds** are whole numbers from 0 to 2^64 - 1 (:data:`MAX_SEED`): a Python or NumPy integer, or
its decimal digits. Negative seeds are refused rather than wrapped around (-1 and 2^64 - 1 would
otherwise be the same run), and so are floats and bools.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from fractions import Fraction

from tpuemb_cfg.base.errors import shown

__all__ = ["MAX_INT64", "MAX_SEED", "MAX_SIZE", "SEED_HELP", "SIZE_HELP", "format_size",
           "parse_seed", "parse_size", "seed_argument", "size_argument"]

#: The largest size (bytes) accepted: 2^63 - 1, the largest file offset.
MAX_SIZE = 2**63 - 1
#: The largest seed: 2^64 - 1 (the seed is one 64-bit word of the generators).
MAX_SEED = 2**64 - 1
#: The largest count TensorFlow holds (int64): steps, tokens, replicas, staleness.
MAX_INT64 = 2**63 - 1

#: What ``--help`` says about a SIZE.
SIZE_HELP = ("SIZE: bytes, or a number with a binary unit K, M, G or T (KiB/KB, MiB/MB, ...: "
             "powers of 1024), e.g. 512M, 1.5G, 2GiB")
#: What ``--help`` says about a seed.
SEED_HELP = "a whole number from 0 to 2^64 - 1"

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?:([KMGT])(?:I?B)?|B)?\s*",
                   re.IGNORECASE)
_EXPECTED = "expected bytes or a number with a binary unit (K, M, G, T), e.g. 268435456, 512M, 2G"
_SHOWN = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20),
          ("KiB", 2**10))


def parse_size(value: object) -> int:
    """Bytes in ``value``: an ``int``, or text in the size grammar (module docstring).

    Raises ``TypeError`` for a value that is neither (a float, a bool, None) and ``ValueError``
    for text that is not a size or a size outside 1 byte .. :data:`MAX_SIZE`; the message says
    what is wrong and expected, for the caller to prefix with its name and the value
    (``--max-memory 1e9: not a size; expected ...``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        if _is_integer(value):
            return parse_size(operator.index(value))  # type: ignore[arg-type]
        raise TypeError(f"not a size ({type(value).__name__}); {_EXPECTED}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(value)
        if match is None:
            raise ValueError(f"not a size; {_EXPECTED}")
        size = int(Fraction(match[1]) * _UNITS[(match[2] or "").upper()])
    if size < 1:
        raise ValueError(f"less than 1 byte; {_EXPECTED}")
    if size > MAX_SIZE:
        raise ValueError(f"more than the largest size, {MAX_SIZE:,} bytes (8 EiB)")
    return size


def format_size(size: int) -> str:
    """``812 bytes``, ``64 KiB``, ``1.5 GiB``: binary units, one decimal where it is not 0."""
    for unit, factor in _SHOWN:
        if size >= factor:
            text = f"{size / factor:.1f}"
            return f"{text.removesuffix('.0')} {unit}"
    return f"{size} byte{'' if size == 1 else 's'}"


def parse_seed(value: object) -> int:
    """A seed (module docstring): an integer, or its decimal digits, from 0 to 2^64 - 1.

    Raises ``TypeError`` for a float, a bool or another type, ``ValueError`` for text that is
    not a whole number or a number outside the range; the message says what is expected, for
    the caller to prefix with its name and the value (``--seed -1: not a seed; expected ...``).
    """
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(f"not a seed; expected {SEED_HELP}")
        value = int(text)
    elif isinstance(value, bool) or not _is_integer(value):
        raise TypeError(f"not a seed ({type(value).__name__}); expected {SEED_HELP}")
    seed = operator.index(value)  # type: ignore[arg-type]
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"not a seed; expected {SEED_HELP}")
    return int(seed)


def _argument(parse: Callable[[object], int], value: object, name: str) -> int:
    """``parse(value)`` with its ``TypeError``/``ValueError`` naming the argument."""
    try:
        return parse(value)
    except TypeError as exc:
        raise TypeError(f"{name}={shown(value)}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{name}={shown(value)}: {exc}") from None


def seed_argument(value: object, name: str = "seed") -> int:
    """A library function's seed argument: :func:`parse_seed`, errors naming the argument
    (``seed=1.5: not a seed (float); expected ...``)."""
    return _argument(parse_seed, value, name)


def size_argument(value: object, name: str) -> int | None:
    """A library function's size argument (``max_memory``): None, an int of bytes or a size
    such as ``"8G"`` (:func:`parse_size`); errors name the argument."""
    return None if value is None else _argument(parse_size, value, name)


def _is_integer(value: object) -> bool:
    """A Python or NumPy integer (anything with ``__index__``), not a bool."""
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):
        return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True

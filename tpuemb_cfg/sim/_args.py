"""Argument checks of the accumulators and the optimizer wrappers, worded like TensorFlow's kernels.

Each helper converts one argument the way TensorFlow converts it before an op runs, or raises
``ValueError`` with TensorFlow's wording, so that a failed call changes no state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Shape = tuple[int | None, ...]
"""A declared shape: one entry per dimension, ``None`` for an unknown dimension."""

DTYPES = ("float16", "float32", "float64")
REDUCTIONS = ("MEAN", "SUM")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def format_shape(shape: Sequence[int | None] | None) -> str:
    """Write a shape the way TensorFlow's messages do: ``[2,3]``, ``[?,3]``, ``<unknown>``."""
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def int_scalar(value: object, name: str) -> int:
    """An int64 scalar argument (Python or NumPy integer, or a 0-d integer array)."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        raise ValueError(f"Argument {name} must be an integer scalar, got bool {value!r}")
    if isinstance(value, int):
        number = value
    else:
        array = np.asarray(value)
        if array.ndim != 0:
            raise ValueError(
                f"Argument {name} must be scalar, but had bad shape {format_shape(array.shape)}"
            )
        if array.dtype.kind not in "iu":
            raise ValueError(
                f"Argument {name} must be an integer scalar, got {array.dtype} {value!r}"
            )
        number = int(array)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"Argument {name} must fit in int64, got {number}")
    return number


def parse_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    try:
        parsed = np.dtype(dtype)
    except TypeError:
        parsed = None
    if parsed is None or parsed.name not in DTYPES:
        raise ValueError(
            f"dtype: got {dtype!r}; allowed: {', '.join(DTYPES)} "
            "(TensorFlow's accumulator kernels exist for these floating types only)"
        )
    return parsed


def parse_reduction(reduction_type: object) -> str:
    if not isinstance(reduction_type, str) or reduction_type not in REDUCTIONS:
        raise ValueError(
            f"reduction_type: got {reduction_type!r}; allowed: 'MEAN', 'SUM' (case-sensitive)"
        )
    return reduction_type


def parse_shape(shape: Sequence[int | None] | None) -> Shape | None:
    if shape is None:
        return None
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise ValueError(
            f"shape: got {shape!r}; expected None or a sequence of dimensions (int >= 0 or None)"
        )
    dims: list[int | None] = []
    for i, dim in enumerate(shape):
        if dim is None:
            dims.append(None)
            continue
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise ValueError(
                f"shape: dimension {i} is {dim!r}; a dimension must be an int >= 0, or None when "
                "unknown"
            )
        dims.append(int(dim))
    return tuple(dims)


def compatible(declared: Shape | None, actual: tuple[int, ...]) -> bool:
    if declared is None:
        return True
    if len(declared) != len(actual):
        return False
    return all(d is None or d == a for d, a in zip(declared, actual, strict=True))


def as_array(value: object, name: str, dtype: np.dtype[Any]) -> np.ndarray:
    """Convert a gradient to a fresh array of ``dtype`` (TensorFlow converts before the op runs)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} cannot be converted to an array: {exc}") from None
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got an array of {array.dtype}")
    return array.astype(dtype, copy=True)


def as_indices(value: object, name: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} cannot be converted to an array: {exc}") from None
    if array.size == 0 and array.dtype.kind == "f":  # [] becomes float64 in NumPy
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got an array of {array.dtype}")
    return array.astype(np.int64, copy=True)

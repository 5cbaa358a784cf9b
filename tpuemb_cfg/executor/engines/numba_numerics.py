"""``numerics`` in compiled code: the same functions, the same bits.

``pow32`` is the very code of ``numerics.pow_core`` (its code object, compiled with the scalar
versions of the helpers ``numerics`` swaps: a bit cast for ``_bits`` / ``_from_bits``, a
conditional expression for ``_where``, ``np.int64`` for ``_int``), rounded to float32 once.
``row_sumsq`` is ``numerics.row_sumsq`` for one row of a table against a saved copy: eight
lanes of float64 squares, combined pairwise (the callers add the rows in order with
``numerics.total``). Everything is ``inline="always"``: the kernels that call these keep one
compiled body each.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from tpuemb_cfg.base import numerics

from .jit import bits_float, float_bits, lanes_sumsq, njit

__all__ = ["pow32", "pow64", "row_sumsq"]


@njit(inline="always")
def _where(condition: bool, yes: Any, no: Any) -> Any:
    return yes if condition else no


@njit(inline="always")
def _int(x: float) -> Any:
    return np.int64(x)


_SCOPE: dict[str, Any] = {
    **vars(numerics), "_bits": float_bits, "_from_bits": bits_float, "_where": _where,
    "_int": _int,
}


def _twin(function: Any) -> Any:
    """``function``'s code compiled over ``_SCOPE``, then made visible to the next twins."""
    twin = njit(inline="always")(types.FunctionType(function.__code__, _SCOPE, function.__name__))
    _SCOPE[function.__name__] = twin
    return twin


_twin(numerics.log_core)
_twin(numerics.exp_core)
pow_core = _twin(numerics.pow_core)


@njit(inline="always")
def pow32(x: np.float32, y: np.float32) -> np.float32:
    """float32 ``x ** y``: ``numerics.pow32`` for one value."""
    return np.float32(pow_core(np.float64(x), np.float64(y)))


@njit(inline="always")
def pow64(x: float, y: float) -> float:
    """float64 ``x ** y``: ``numerics.pow64`` for one value (``pow32`` before rounding)."""
    return pow_core(np.float64(x), np.float64(y))  # type: ignore[no-any-return]


@njit(inline="always")
def row_sumsq(params: np.ndarray, r: int, before: np.ndarray, lanes: np.ndarray) -> float:
    """``numerics.row_sumsq`` of row ``r`` of ``params`` against ``before`` (1-D); ``lanes``: a
    float64 [8] scratch array. The whole blocks of 8 columns as vector operations
    (``jit.lanes_sumsq``), then the last columns each into its lane, in column order."""
    lanes_sumsq(params, r, before, lanes)
    dim = before.shape[0]
    full = dim - dim % 8
    for d in range(full, dim):
        e = np.float64(params[r, d] - before[d])
        lanes[d - full] += e * e
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + (
        (lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))

"""The float32 arithmetic the executor promises: the same bits on every machine (docs/numerics.md).

IEEE 754 rounds ``+ - * /`` and ``sqrt`` correctly, so they give the same bits on every CPU,
vector width and compiler, provided no two of them are fused (no FMA contraction, no
reassociation: NumPy applies one operation per call, and numba compiles without fast-math).
Everything else - ``pow``, ``exp``, ``log`` - is computed by libraries whose last bits differ
between CPUs (NumPy's AVX-512 ``power``, glibc's FMA and non-FMA variants, LLVM's vector
library) and between versions. So the executor never calls them for a number that reaches a
table, a slot, an activation or a report. This module holds the replacements and the
summation orders, written once:

``pow32(x, y)``
    float32 ``x ** y`` with C99's special cases (Annex F.9.4.4): ``|x| ** y`` is evaluated as
    ``exp(y * log|x|)`` in float64 from ``+ - * /``, ``floor`` and bit operations only (a
    polynomial logarithm and exponential: relative error below ``2.5e-16 (4 + |y ln x|)``, under
    3e-14 for any power float32 can hold), then rounded to float32 once. So the float32 result
    is the correctly rounded one except when the exact power lies within that distance of a
    rounding boundary; either way the bits are the same everywhere. ``pow64`` is the float64
    value before rounding, for Python scalars (the synthetic run's constants).
``cos32(x)`` / ``log32(x)``
    float32 cosine and natural logarithm of float32 ``x`` (the learning-rate schedules Keras
    computes in float32, ``tpuemb_cfg.embedding.keras_schedules``), the same way: float64 from
    exact operations (``cos``: ``x`` reduced by a three-part pi/2, then the Taylor series of
    ``cos``/``sin`` on [-pi/4, pi/4]; ``log``: ``log_core`` below), rounded to float32 once;
    ``cos64`` and ``log64`` are the float64 values for Python scalars. Relative error of the
    float64 value below 1e-15 (``cos``: for ``|x| < 2^20``, beyond which the reduction loses bits;
    the values stay the same everywhere).
``row_sumsq(a, b)`` / ``total(values)``
    the squared Euclidean length of each row of a float32 difference, and a sum of such values:
    the report's update norm and the synthetic loss. Each float32 difference is squared in
    float64 (exact: 48 significant bits), the squares of a row are added in eight lanes (lane
    ``l`` sums columns ``l, l + 8, l + 16, ...`` in order, from 0), the lanes are added as
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``, and rows are added one after another
    in row order (``total``). The lanes let the compiled kernels run eight independent additions
    at once instead of waiting on each; any backend that computes the per-row values and adds
    them in row order gets the same bits, whatever its threads or hosts.

The functions are written once, over "values" that are NumPy arrays here and float64 scalars in
compiled code: ``engines.numba_numerics`` compiles the very same code objects with the scalar
versions of the four helpers below (``_bits``, ``_from_bits``, ``_where``, ``_int``), as
``counter`` does for the default rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LANES", "cos32", "cos64", "log32", "log64", "pow32", "pow64", "row_sumsq", "total"]

F32 = np.float32
F64 = np.float64
LANES = 8  # the lanes of ``row_sumsq``

_INF = float("inf")
_SQRT2 = 1.4142135623730951
_LN2_HI = 6.93147180369123816490e-01  # 0x3FE62E42FEE00000: n * _LN2_HI is exact for |n| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_EXPONENT_LIMIT = 708.0  # |y log x| beyond this: 0 or inf (e^-708 ~ 3e-308, e^708 ~ 3e307)
_MANTISSA = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
# log(m) = 2 s (1 + s^2/3 + s^4/5 + ...), s = (m - 1) / (m + 1), |s| <= 0.172: 13 terms leave
# less than 1e-18 out. exp(r) = sum r^k / k!, |r| <= 0.347: 14 terms leave less than 1e-17.
_LOG_SERIES = tuple(1.0 / (2 * k + 1) for k in range(13))
_EXP_SERIES = tuple(1.0 / float(np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(14))
# cos: x = n pi/2 + r, pi/2 in three parts of 33 bits (fdlibm's), so n * part is exact for
# |n| < 2^20; cos r and sin r by their Taylor series on |r| <= pi/4, the first term left out
# beyond r^22 (r^23) below 1e-24. The coefficients are correctly rounded (Python's int division).
_TWO_OVER_PI = 6.36619772367581382433e-01
_PIO2 = (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
_COS_SERIES = tuple((-1) ** k / math.factorial(2 * k) for k in range(12))
_SIN_SERIES = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(12))


# -- the four helpers that differ between NumPy and compiled code ------------------------------


def _bits(x: Any) -> Any:
    """The IEEE bits of float64 ``x`` as int64."""
    return np.asarray(x, dtype=F64).view(np.int64)


def _from_bits(i: Any) -> Any:
    """The float64 whose IEEE bits are the int64 ``i``."""
    return np.asarray(i, dtype=np.int64).view(F64)


def _where(condition: Any, yes: Any, no: Any) -> Any:
    return np.where(condition, yes, no)


def _int(x: Any) -> Any:
    """An integral float64 as int64."""
    return np.int64(x)


# -- the shared code ---------------------------------------------------------------------------


def log_core(x: Any) -> Any:
    """Natural logarithm of a positive, finite, normal float64 ``x``.

    ``x = m 2^e`` with ``m`` in [sqrt(1/2), sqrt(2)); ``log x = e ln2 + 2 atanh(s)``,
    ``s = (m - 1) / (m + 1)``, the series of atanh summed by Horner's rule; ``ln2`` in two parts
    so ``e ln2`` loses nothing."""
    bits = _bits(x)
    e = (bits >> 52) - 1023
    m = _from_bits((bits & _MANTISSA) | _ONE_BITS)  # [1, 2)
    big = m > _SQRT2
    m = _where(big, m * 0.5, m)
    e = _where(big, e + 1, e)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    c = _LOG_SERIES
    p = s2 * (c[9] + s2 * (c[10] + s2 * (c[11] + s2 * c[12])))
    p = s2 * (c[5] + s2 * (c[6] + s2 * (c[7] + s2 * (c[8] + p))))
    p = 1.0 + s2 * (c[1] + s2 * (c[2] + s2 * (c[3] + s2 * (c[4] + p))))
    ef = F64(e)
    return ef * _LN2_HI + ((s + s) * p + ef * _LN2_LO)


def exp_core(z: Any) -> Any:
    """``e^z`` for float64 ``z`` in [-708, 708]: ``z = n ln2 + r``, ``|r| <= ln2 / 2``,
    ``e^z = 2^n e^r``, the Taylor series of ``e^r`` by Horner's rule."""
    n = np.floor(z * _INV_LN2 + 0.5)
    r = (z - n * _LN2_HI) - n * _LN2_LO
    c = _EXP_SERIES
    p = c[9] + r * (c[10] + r * (c[11] + r * (c[12] + r * c[13])))
    p = c[5] + r * (c[6] + r * (c[7] + r * (c[8] + r * p)))
    p = c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * p))))
    return p * _from_bits((_int(n) + 1023) << 52)


def pow_core(x: Any, y: Any) -> Any:
    """float64 ``x ** y`` with C99's special cases (Annex F.9.4.4), ``|x| ** y`` through
    ``log_core`` and ``exp_core``; below ``e^-708`` it gives 0 (the callers round to float32, or
    use it for constants)."""
    ax = abs(x)
    ay = abs(y)
    regular = (ax > 0.0) & (ax < _INF) & (ay < _INF)  # both finite (NaN compares false), x != 0
    z = y * log_core(_where(regular, ax, 1.0))
    z = _where(regular, z, 0.0)
    magnitude = exp_core(_where(z > _EXPONENT_LIMIT, _EXPONENT_LIMIT,
                            _where(z < -_EXPONENT_LIMIT, -_EXPONENT_LIMIT, z)))
    magnitude = _where(z > _EXPONENT_LIMIT, _INF, _where(z < -_EXPONENT_LIMIT, 0.0, magnitude))
    integral = np.floor(y) == y  # false for NaN and +-inf
    odd = integral & (ay < 9007199254740992.0) & (np.floor(y * 0.5) != y * 0.5)
    # |x| ** y when y is infinite or x is 0 or infinite (the sign is applied below)
    grows = (ax > 1.0) == (y > 0.0)
    limit = _where(ay == _INF, _where(ax == 1.0, 1.0, _where(grows, _INF, 0.0)),
                   _where((ax == 0.0) == (y < 0.0), _INF, 0.0))
    result = _where(regular, magnitude, limit)
    negative = x < 0.0
    # negative x: odd integral y keeps the sign; a finite non-integral y has no real power
    result = _where(negative & odd & (ay < _INF), -result, result)
    result = _where(negative & (np.floor(y) != y) & (ax < _INF) & (ay < _INF), np.nan, result)
    # -0.0 raised to an odd integral power stays -0.0 (or -inf for a negative one)
    result = _where((ax == 0.0) & odd & (_bits(x) < 0), -result, result)
    result = _where((x != x) | (y != y), np.nan, result)
    return _where((y == 0.0) | (x == 1.0), 1.0, result)


def _series(z: Any, c: tuple[float, ...]) -> Any:
    """``c[0] + c[1] z + c[2] z^2 + ...`` by Horner's rule."""
    p = c[-1] + z * 0.0
    for coefficient in c[-2::-1]:
        p = coefficient + z * p
    return p


def _cos(x: Any) -> Any:
    """float64 cosine of a finite float64 array ``x`` (module docstring): ``x = n pi/2 + r``,
    then ``cos r``, ``-sin r``, ``-cos r`` or ``sin r`` by the quadrant ``n mod 4``."""
    n = np.floor(x * _TWO_OVER_PI + 0.5)
    r = ((x - n * _PIO2[0]) - n * _PIO2[1]) - n * _PIO2[2]
    z = r * r
    cosine = _series(z, _COS_SERIES)
    sine = r * _series(z, _SIN_SERIES)
    quadrant = n.astype(np.int64) & 3
    value = _where(quadrant == 0, cosine, _where(quadrant == 1, -sine,
                                                 _where(quadrant == 2, -cosine, sine)))
    return value


def _lanes_total(lanes: Any) -> Any:
    """``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`` of the last axis."""
    return ((lanes[..., 0] + lanes[..., 1]) + (lanes[..., 2] + lanes[..., 3])) + (
        (lanes[..., 4] + lanes[..., 5]) + (lanes[..., 6] + lanes[..., 7])
    )


# -- NumPy entry points ------------------------------------------------------------------------


def pow32(x: Any, y: Any) -> Any:
    """float32 ``x ** y`` (module docstring): arrays or scalars, broadcast as NumPy does; the
    result is float32 (a NumPy scalar for scalar inputs)."""
    with np.errstate(all="ignore"):
        result = pow_core(np.asarray(x, dtype=F32).astype(F64),
                          np.asarray(y, dtype=F32).astype(F64))
        out = np.asarray(result).astype(F32)
    return out[()] if out.ndim == 0 else out


def pow64(x: float, y: float) -> float:
    """float64 ``x ** y`` of Python numbers through the same code (``pow32`` before rounding)."""
    with np.errstate(all="ignore"):
        return float(pow_core(np.asarray(x, dtype=F64), np.asarray(y, dtype=F64)))


def cos64(x: Any) -> Any:
    """float64 cosine (module docstring): arrays or scalars (a Python float for a scalar);
    NaN for NaN and infinite ``x``."""
    x = np.asarray(x, dtype=F64)
    finite = np.isfinite(x)
    with np.errstate(all="ignore"):
        value = np.where(finite, _cos(np.where(finite, x, 0.0)), np.nan)
    return float(value) if value.ndim == 0 else value


def cos32(x: Any) -> Any:
    """float32 cosine of float32 ``x`` (module docstring), a NumPy scalar for a scalar."""
    out = np.asarray(cos64(np.asarray(x, dtype=F32).astype(F64))).astype(F32)
    return out[()] if out.ndim == 0 else out


def log64(x: Any) -> Any:
    """float64 natural logarithm with C99's special cases: ``-inf`` at 0, NaN below 0 and for
    NaN, ``inf`` at ``inf``; arrays or scalars (a Python float for a scalar)."""
    x = np.asarray(x, dtype=F64)
    regular = (x > 0.0) & (x < _INF)
    with np.errstate(all="ignore"):
        if regular.all():
            value = log_core(x)
        else:
            value = log_core(np.where(regular, x, 1.0))
            value = np.where(regular, value, np.where(x == 0.0, -_INF,
                                                      np.where(x == _INF, _INF, np.nan)))
    return float(value) if value.ndim == 0 else value


def log32(x: Any) -> Any:
    """float32 natural logarithm of float32 ``x`` (``log64`` rounded once)."""
    out = np.asarray(log64(np.asarray(x, dtype=F32).astype(F64))).astype(F32)
    return out[()] if out.ndim == 0 else out


def row_sumsq(after: np.ndarray, before: np.ndarray) -> np.ndarray:
    """float64 [n]: per row of the float32 [n, D] arrays, the sum of squares of ``after -
    before`` (the difference in float32), added in ``LANES`` lanes (module docstring)."""
    delta = (np.asarray(after, dtype=F32) - np.asarray(before, dtype=F32)).astype(F64)
    n, dim = delta.shape
    blocks = -(-dim // LANES)
    squares = np.zeros((n, blocks * LANES), dtype=F64)
    np.multiply(delta, delta, out=squares[:, :dim])
    squares = squares.reshape(n, blocks, LANES)
    lanes = squares[:, 0, :].copy()
    for k in range(1, blocks):
        lanes += squares[:, k, :]
    return np.asarray(_lanes_total(lanes), dtype=F64)


def total(values: np.ndarray) -> float:
    """The float64 sum of ``values`` added one after another in order, from 0."""
    values = np.asarray(values, dtype=F64).reshape(-1)
    if values.shape[0] == 0:
        return 0.0
    return float(np.add.accumulate(values)[-1])

"""Counter-based random numbers for default initial values: a SplitMix64 hash and a ziggurat.

The default value of element (r, c) of a table (spec section 11) is a function of
(seed, table index, r, c) alone, never of a generator's position in a stream. So any subset of
rows can be initialised on its own (a shard of a Ray-sharded table, a row first touched by a
lazy table) and equals the same rows of the whole table bit for bit, and whole tables are
initialised in parallel.

**Bits.** Each attempt a (a = 0, 1, ...) at element (r, c) of a table of dimension D draws the
64-bit word

    z = mix(K + G (32 e + a))  mod 2^64,        e = r D + c,
    mix(z): z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
            z ^ (z >> 31)
    K = mix(mix(seed) + G (table + 1)),         G = 0x9E3779B97F4A7C15

that is, SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014; it passes TestU01's BigCrush) read at counter 32 e + a of the stream K of
(seed, table). ``mix`` is a bijection of 64-bit words, so distinct counters give distinct words.
The low 32 bits of z are the attempt's main word, the high 32 bits its wedge word. Elements up
to 2^59 per table, attempts up to 32.

**Truncated normal: a ziggurat on [0, 2).** The half density f(x) = exp(-x^2/2) on [0, 2) is
covered by 128 rectangles ("layers") of equal area V (Marsaglia and Tsang, "The ziggurat method
for generating random variables", 2000, with the tail cut at 2 instead of sampled):

    layers 0..27     together the rectangle [0, 2) x [0, 14 V), which lies under f (14 V < f(2))
    layer i >= 28    the rectangle [0, X[i]) x [F[i], F[i+1]), with X[28] = 2, F[28] = 14 V,
                     F[i+1] = F[i] + V / X[i], X[i+1] = f^-1(F[i+1]) = sqrt(-2 ln F[i+1]),
                     X[128] = 0, F[128] = 1

V is the area that closes the top layer exactly (X[127] (1 - F[127]) = V), found by bisection
(V = 0.0094414...). An attempt with main word w takes layer i = w mod 128, sign bit
(w >> 7) mod 2 and x = U X[i], U = ((w >> 8) + 1/2) / 2^24 (so x < 2), and accepts x when

    x < X[i+1]                          (the part of the layer under the curve), or else
    F[i] + U2 (F[i+1] - F[i]) < f(x),   U2 = (wedge word + 1/2) / 2^32   (the wedge test).

Points uniform under the half curve on [0, 2), signed, have the density of a standard normal
restricted to (-2, 2): exactly the "redraw until within two standard deviations" of
TensorFlow's truncated-normal initializer. Attempt 0 needs no wedge test for 97.7% of elements
and is accepted for 99%. The value is float32(s x stddev), s = +1 or -1, stddev = 1 / sqrt(D).

**The same bits everywhere.** Integer arithmetic modulo 2^64 and float64 +, -, *, / and sqrt,
which IEEE 754 rounds identically on every machine, in NumPy and in compiled code. There is no
libm call: exp(-t) is a polynomial raised to the 16th power (``exp_minus``, relative error
below 1e-15 for t <= 8), and the ziggurat's table is built with that exp and a logarithm from
``frexp`` and the series of atanh, so the table, and every value, is the same on every machine.
The NumPy functions here are the reference; ``engines.numba_init`` compiles the same operations
(``mix`` and ``exp_minus`` are the very functions below), and the two agree bit for bit
(tests/test_counter_init.py).

**Other distributions** (a spec's initializer, ``executor.initializers``; NumPy only), from the
same words of the same stream, so again a function of (seed, table, r, c) alone:

- *uniform* on [low, high]: the attempt-0 word z of the element, ``U = ((z >> 11) + 1/2) / 2^53``
  (in (0, 1)), the value ``float32(low + (high - low) U)``;
- *normal* (not truncated): Marsaglia's polar method. Attempt a's word gives
  ``u = (low 32 bits + 1/2) / 2^31 - 1`` and ``v`` from the high 32 bits (both in (-1, 1));
  it is accepted when ``s = u^2 + v^2 < 1`` (probability pi/4; 32 attempts leave 1e-21), and
  the value is ``u sqrt(-2 ln(s) / s)``, ``ln`` the executor's own (``numerics.log64``), then
  ``float32(mean + stddev x)``;
- *truncated normal* with a mean: the ziggurat above, ``float32(mean + stddev s x)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tpuemb_cfg.base.numerics import log64

__all__ = [
    "LAYER_F",
    "LAYER_X",
    "MAX_ATTEMPTS",
    "exp_minus",
    "gaussian_rows",
    "mix",
    "normal_rows",
    "stream_key",
    "uniform_rows",
]

G = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_S8 = np.uint64(8)
_S7 = np.uint64(7)
_S5 = np.uint64(5)
_MASK24 = np.uint64(0xFFFFFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_LOW7 = np.uint64(127)
_ONE = np.uint64(1)
_WORD = (1 << 64) - 1

# Attempts per element before giving up: an attempt fails with probability 0.01, so 0.01^32
# bounds the loop; an element that reached it would be 0.
MAX_ATTEMPTS = 32
BASE_LAYERS = 28

# exp(-s) = sum_k (-s)^k / k!, k = 0..15, for s = t / 16 (``exp_minus``).
_C = tuple(1.0 / math.factorial(k) for k in range(16))
C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15 = _C
_LN2 = 0.6931471805599453
SCALE_24 = 1.0 / 2.0**24
SCALE_32 = 1.0 / 2.0**32


def mix(z: Any) -> Any:
    """SplitMix64's output function of uint64 ``z`` (a NumPy array or, compiled, a scalar)."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def _mix_int(z: int) -> int:
    z &= _WORD
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _WORD
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _WORD
    return z ^ (z >> 31)


def stream_key(seed: int, table: int) -> np.uint64:
    """K of (``seed``, ``table``) (module docstring); ``seed`` is taken modulo 2^64."""
    return np.uint64(_mix_int(_mix_int(int(seed)) + 0x9E3779B97F4A7C15 * (int(table) + 1)))


def _log_scalar(y: float) -> float:
    """ln y for y > 0: y = m 2^e (frexp, exact), ln m = 2 atanh(z), z = (m - 1) / (m + 1)."""
    m, e = math.frexp(y)
    z = (m - 1.0) / (m + 1.0)
    z2 = z * z
    total = 0.0
    for k in range(41, 0, -2):  # |z| <= 1/3: the terms beyond z^41 are below 1e-20
        total = total * z2 + 1.0 / k
    return e * _LN2 + 2.0 * z * total


def exp_minus(t: Any) -> Any:
    """exp(-t) for float64 t in [0, 8] (a scalar or an array), with +, - and * only.

    With m = -t/16: the Taylor polynomial of exp(m) of degree 15 (truncation error below 1e-18
    for |m| <= 1/2), evaluated by Estrin's scheme (a dependency chain of depth 4 instead of
    Horner's 15, so compiled code overlaps the products), then squared four times. The same
    Python function runs on NumPy arrays and, compiled by numba, on scalars, so both evaluate
    the same operations in the same order.
    """
    m = t * -0.0625
    m2 = m * m
    m4 = m2 * m2
    m8 = m4 * m4
    low = (C0 + C1 * m + m2 * (C2 + C3 * m)) + m4 * (C4 + C5 * m + m2 * (C6 + C7 * m))
    high = (C8 + C9 * m + m2 * (C10 + C11 * m)) + m4 * (C12 + C13 * m + m2 * (C14 + C15 * m))
    p = low + m8 * high
    p = p * p
    p = p * p
    p = p * p
    return p * p


def _build(area: float) -> tuple[list[float], list[float]] | None:
    """The layers for layer area ``area``, or None when they overshoot the top of f."""
    x = [2.0] * (BASE_LAYERS + 1)
    f = [0.0] * BASE_LAYERS + [area * (BASE_LAYERS // 2)]
    for i in range(BASE_LAYERS, 127):
        top = f[i] + area / x[i]
        if top >= 1.0:
            return None
        f.append(top)
        x.append(math.sqrt(-2.0 * _log_scalar(top)))
    return x + [0.0], f + [1.0]


def _layers() -> tuple[np.ndarray, np.ndarray]:
    """X[0..128] and F[0..128] (module docstring), by bisection on V: a larger V raises every
    layer, so the top layer's area X[127] (1 - F[127]) shrinks below V."""
    low, high = 0.009, 0.0105
    for _ in range(60):
        middle = 0.5 * (low + high)
        layers = _build(middle)
        if layers is None or layers[0][127] * (1.0 - layers[1][127]) < middle:
            high = middle
        else:
            low = middle
    x, f = _build(low)  # type: ignore[misc]
    return np.array(x, dtype=np.float64), np.array(f, dtype=np.float64)


LAYER_X, LAYER_F = _layers()  # X[0..128] and F[0..128], float64 (module docstring)


def _attempt(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s x, accepted) for the attempts of words ``z`` (module docstring)."""
    main = z & _MASK32
    layer = (main & _LOW7).astype(np.intp)
    sign = 1.0 - 2.0 * ((main >> _S7) & _ONE).astype(np.float64)
    x = (((main >> _S8) & _MASK24).astype(np.float64) + 0.5) * SCALE_24 * LAYER_X[layer]
    accepted = x < LAYER_X[layer + 1]
    wedge = np.flatnonzero(~accepted)
    if wedge.size:
        u2 = ((z[wedge] >> _S32).astype(np.float64) + 0.5) * SCALE_32
        low = LAYER_F[layer[wedge]]
        y = low + u2 * (LAYER_F[layer[wedge] + 1] - low)
        accepted[wedge] = y < exp_minus(0.5 * x[wedge] * x[wedge])
    return x * sign, accepted


def _elements(rows: np.ndarray, dimension: int) -> np.ndarray:
    """uint64 element numbers e = r D + c of ``rows`` (flattened row by row)."""
    return (
        rows.astype(np.uint64)[:, None] * np.uint64(dimension)
        + np.arange(dimension, dtype=np.uint64)[None, :]
    ).reshape(-1)


def normal_rows(
    seed: int, table: int, rows: np.ndarray, dimension: int, stddev: float, mean: float = 0.0
) -> np.ndarray:
    """float32 [len(rows), dimension]: the truncated-normal values of ``rows`` (module docstring),
    ``mean + stddev s x`` (``mean`` 0: ``stddev s x``, the default rows).

    ``rows``: int64 row ids; the result does not depend on their order or on which other rows
    are asked for.
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    key = stream_key(seed, table)
    out = np.zeros((rows.shape[0], dimension), dtype=np.float32)
    flat = out.reshape(-1)
    element = _elements(rows, dimension)
    todo = np.arange(flat.shape[0])
    for attempt in range(MAX_ATTEMPTS):
        if not todo.size:
            break
        z = mix(key + G * ((element[todo] << _S5) | np.uint64(attempt)))
        value, accepted = _attempt(z)
        scaled = value[accepted] * stddev
        flat[todo[accepted]] = (scaled if mean == 0.0 else mean + scaled).astype(np.float32)
        todo = todo[~accepted]
    return out


def uniform_rows(
    seed: int, table: int, rows: np.ndarray, dimension: int, low: float, high: float
) -> np.ndarray:
    """float32 [len(rows), dimension]: uniform values in [low, high] (module docstring)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    key = stream_key(seed, table)
    z = mix(key + G * (_elements(rows, dimension) << _S5))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 2.0**53)
    values: np.ndarray = (low + (high - low) * u).astype(np.float32)
    return values.reshape(rows.shape[0], dimension)


def gaussian_rows(
    seed: int, table: int, rows: np.ndarray, dimension: int, mean: float, stddev: float
) -> np.ndarray:
    """float32 [len(rows), dimension]: normal values of ``mean`` and ``stddev``, not truncated
    (the polar method, module docstring)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    key = stream_key(seed, table)
    element = _elements(rows, dimension)
    flat = np.zeros(element.shape[0], dtype=np.float32)
    todo = np.arange(element.shape[0])
    for attempt in range(MAX_ATTEMPTS):
        if not todo.size:
            break
        z = mix(key + G * ((element[todo] << _S5) | np.uint64(attempt)))
        u = ((z & _MASK32).astype(np.float64) + 0.5) * (1.0 / 2.0**31) - 1.0
        v = ((z >> _S32).astype(np.float64) + 0.5) * (1.0 / 2.0**31) - 1.0
        s = u * u + v * v
        accepted = s < 1.0
        s, u = s[accepted], u[accepted]
        x = u * np.sqrt(-2.0 * log64(s) / s)
        flat[todo[accepted]] = (mean + stddev * x).astype(np.float32)
        todo = todo[~accepted]
    return flat.reshape(rows.shape[0], dimension)

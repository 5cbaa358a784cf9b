"""Compiled default initial values: ``counter.normal_rows`` and constant fills, parallel over rows.

The same operations as the NumPy reference in ``executor.counter`` (whose docstring states the
generator and the sampler), element by element in the same order, so the two agree bit for bit:
integer arithmetic modulo 2^64 and float64 +, -, *; ``mix`` and ``exp_minus`` are the very
functions of ``counter``, compiled. A row takes three passes over a buffer that stays in the L1
cache: the attempt-0 words of every column (no branch, so the hashes of neighbouring columns
overlap in the pipeline), the accepted-inside-the-layer values with NaN for the 2.3% of elements
that need more (no branch either), then the wedge test and further attempts for those. Ranges of
rows run on several threads (``numba_update.run_ranges``). The kernels write into arrays
allocated by the caller (or into the rows of a table, in place), so a table initialised here is
written exactly once.
"""

from __future__ import annotations

import numpy as np

from .. import counter
from ..counter import (
    _LOW7,
    _MASK24,
    _MASK32,
    _ONE,
    _S5,
    _S7,
    _S8,
    _S32,
    LAYER_F,
    LAYER_X,
    MAX_ATTEMPTS,
    SCALE_24,
    SCALE_32,
    G,
    stream_key,
)
from .jit import njit
from .numba_update import run_ranges

__all__ = ["fill_normal_at", "fill_normal_range", "fill_normal_rows", "fill_rows"]

_NAN = np.float32(np.nan)

_mix = njit(inline="always")(counter.mix)
_exp_minus = njit(inline="always")(counter.exp_minus)


@njit(inline="always")
def _inside(z: np.uint64, layer_x: np.ndarray) -> tuple[float, bool]:
    """(s x, inside the layer) of the attempt with word ``z``: ``counter._attempt``'s first part."""
    main = z & _MASK32
    layer = np.intp(main & _LOW7)
    sign = 1.0 - 2.0 * np.float64(np.int64((main >> _S7) & _ONE))
    x = (np.float64(np.int64((main >> _S8) & _MASK24)) + 0.5) * SCALE_24 * layer_x[layer]
    return x * sign, x < layer_x[layer + 1]


@njit(cache=True)
def _rest(
    z: np.uint64, element: np.uint64, key: np.uint64, layer_x: np.ndarray, layer_f: np.ndarray
) -> float:
    """s x of the element whose attempt-0 word ``z`` falls outside the inner part of its layer:
    its wedge test, then further attempts."""
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            z = _mix(key + G * ((element << _S5) | np.uint64(attempt)))
        value, accepted = _inside(z, layer_x)
        if not accepted:
            main = z & _MASK32
            layer = np.intp(main & _LOW7)
            x = abs(value)
            u2 = (np.float64(np.int64(z >> _S32)) + 0.5) * SCALE_32
            low = layer_f[layer]
            accepted = low + u2 * (layer_f[layer + 1] - low) < _exp_minus(0.5 * x * x)
        if accepted:
            return value
    return 0.0


@njit(inline="always")
def _row(
    r: np.uint64, out: np.ndarray, i: int, words: np.ndarray, key: np.uint64, stddev: float,
    layer_x: np.ndarray, layer_f: np.ndarray,
) -> None:
    dimension = out.shape[1]
    base = r * np.uint64(dimension)
    for c in range(dimension):
        words[c] = _mix(key + G * ((base + np.uint64(c)) << _S5))
    for c in range(dimension):
        value, inside = _inside(words[c], layer_x)
        out[i, c] = np.float32(value * stddev) if inside else _NAN
    for c in range(dimension):
        if out[i, c] != out[i, c]:
            value = _rest(words[c], base + np.uint64(c), key, layer_x, layer_f)
            out[i, c] = np.float32(value * stddev)


@njit(nogil=True, cache=True, error_model="numpy")
def _normal(
    rows: np.ndarray, first: int, scatter: bool, out: np.ndarray, key: np.uint64,
    stddev: float, layer_x: np.ndarray, layer_f: np.ndarray, start: int, stop: int,
) -> float:
    # Row i of the request is table row rows[i] (no ``rows``: first + i), written to out[i]
    # (``scatter``: to out[rows[i]], in place in the table).
    words = np.empty(out.shape[1], dtype=np.uint64)
    for i in range(start, stop):
        r = rows[i] if rows.shape[0] else first + i
        _row(np.uint64(r), out, r if scatter else i, words, key, stddev, layer_x, layer_f)
    return 0.0


@njit(nogil=True, cache=True)
def _fill(rows: np.ndarray, out: np.ndarray, value: np.float32, start: int, stop: int) -> float:
    for i in range(start, stop):
        r = rows[i] if rows.shape[0] else i
        for c in range(out.shape[1]):
            out[r, c] = value
    return 0.0


_ALL = np.zeros(0, dtype=np.int64)


def fill_rows(out: np.ndarray, value: np.float32, rows: np.ndarray | None = None) -> None:
    """``out[:] = value`` (``rows``: ``out[rows] = value``), ranges of rows on several threads
    (the first touch of a fresh array's pages, too)."""
    ids = _ALL if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
    count = out.shape[0] if rows is None else ids.shape[0]
    run_ranges(_fill, count, count * out.shape[1], ids, out, np.float32(value))


def fill_normal_rows(
    seed: int, table: int, rows: np.ndarray, out: np.ndarray, stddev: float
) -> None:
    """Write ``counter.normal_rows(seed, table, rows, out.shape[1], stddev)`` into ``out``."""
    ids = np.ascontiguousarray(rows, dtype=np.int64)
    if ids.shape[0]:
        _run(ids, 0, False, out, seed, table, stddev)


def fill_normal_range(seed: int, table: int, start: int, out: np.ndarray, stddev: float) -> None:
    """``fill_normal_rows`` of the rows start, start + 1, ..., start + len(out) - 1."""
    _run(_ALL, start, False, out, seed, table, stddev)


def fill_normal_at(seed: int, table: int, rows: np.ndarray, array: np.ndarray,
                   stddev: float) -> None:
    """Write the values of ``rows`` into those rows of ``array`` (a whole table), in place."""
    ids = np.ascontiguousarray(rows, dtype=np.int64)
    if ids.shape[0]:
        _run(ids, 0, True, array, seed, table, stddev)


def _run(rows: np.ndarray, first: int, scatter: bool, out: np.ndarray, seed: int, table: int,
         stddev: float) -> None:
    count = rows.shape[0] if rows.shape[0] else out.shape[0]
    run_ranges(_normal, count, count * out.shape[1] * 8, rows, int(first), scatter, out,
               stream_key(seed, table), float(stddev), LAYER_X, LAYER_F)

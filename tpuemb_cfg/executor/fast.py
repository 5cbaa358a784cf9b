"""Compiled (numba) versions of the executor's hot loops; the ``numba`` engine's kernels.

Import this module only through ``tpuemb_cfg.executor.engine``: it imports numba at the top, and
``import tpuemb_cfg``, ``tpuemb validate`` and the NumPy engine must never pay for that.

Every kernel computes what its namesake in ``kernels`` (or the optimizer in ``optimizers``)
computes, in float32, in the same order of operations, so the two engines agree to a few ULP:

- ``deduplicate``: an open-addressing hash table of the ids (size the next power of two of twice
  the batch, never the vocabulary), then a sort of the *unique* ids only, so the result is the
  sorted unique ids exactly as ``np.unique`` gives them;
- ``segment_sum`` / ``backprop_sum``: a stable counting sort of the occurrences by segment
  (a CSR layout), then one parallel loop over segments that adds each segment's rows in
  occurrence order (the spec's reference order), with no [occurrences, D] temporary;
- ``gather`` / ``scatter`` / ``combine``: whole rows, parallel over rows or bags;
- ``update_*``: the whole per-row pipeline of spec section 6 fused into one pass over each
  updated row (gradient clipping, weight decay, the optimizer, weight clipping), in place, so
  every touched parameter and slot is read once and written once.

Scalars arrive as ``np.float32`` and every literal below is a float32 constant, so numba keeps
the arithmetic in float32 (a bare ``1.0`` would promote the expression to float64). Absent clip
bounds are passed as -inf/+inf: ``x < -inf`` is never true, so NaN stays NaN as in ``kernels.clip``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = [
    "backprop_sum",
    "combine",
    "deduplicate",
    "gather",
    "scatter",
    "segment_sum",
    "update_adagrad",
    "update_adam",
    "update_ftrl",
    "update_momentum",
    "update_sgd",
]

F32 = np.float32
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_HALF = np.float32(0.5)
_EMPTY = np.int64(-1)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: multiply, keep the top bits


# --------------------------------------------------------------------------------------------
# De-duplication and segment sums


@njit(cache=True)
def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique, inverse)`` as ``kernels.deduplicate``: sorted distinct ids, position per id.

    One pass over the ids with an open-addressing hash table (linear probing) assigns each new
    id a slot in first-appearance order; sorting the u unique ids (u << n for Zipf data) and
    relabelling gives ``np.unique``'s answer in O(n + u log u) instead of O(n log n).
    """
    n = ids.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    keys = np.full(1 << bits, _EMPTY, dtype=np.int64)
    label = np.empty(1 << bits, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)  # unique ids in first-appearance order
    inverse = np.empty(n, dtype=np.int64)
    count = 0
    for j in range(n):
        key = ids[j]
        slot = np.int64((np.uint64(key) * _GOLDEN) >> shift)
        while True:
            stored = keys[slot]
            if stored == key:
                inverse[j] = label[slot]
                break
            if stored == _EMPTY:
                keys[slot] = key
                label[slot] = count
                first[count] = key
                inverse[j] = count
                count += 1
                break
            slot = (slot + 1) & mask
    order = np.argsort(first[:count])
    unique = first[:count][order]
    rank = np.empty(count, dtype=np.int64)
    for k in range(count):
        rank[order[k]] = k
    for j in range(n):
        inverse[j] = rank[inverse[j]]
    return unique, inverse


@njit(cache=True)
def _csr(segments: np.ndarray, num_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, order)``: occurrences grouped by segment, stable (a counting sort)."""
    offsets = np.zeros(num_segments + 1, dtype=np.int64)
    for j in range(segments.shape[0]):
        offsets[segments[j] + 1] += 1
    for s in range(num_segments):
        offsets[s + 1] += offsets[s]
    cursor = offsets[:-1].copy()
    order = np.empty(segments.shape[0], dtype=np.int64)
    for j in range(segments.shape[0]):
        s = segments[j]
        order[cursor[s]] = j
        cursor[s] += 1
    return offsets, order


@njit(parallel=True, cache=True)
def _sum_rows(
    values: np.ndarray, offsets: np.ndarray, order: np.ndarray, dim: int
) -> np.ndarray:
    num_segments = offsets.shape[0] - 1
    out = np.zeros((num_segments, dim), dtype=np.float32)
    for s in prange(num_segments):
        for k in range(offsets[s], offsets[s + 1]):
            j = order[k]
            for d in range(dim):
                out[s, d] += values[j, d]
    return out


@njit(parallel=True, cache=True)
def _sum_scaled_rows(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    offsets: np.ndarray,
    order: np.ndarray,
) -> np.ndarray:
    num_segments = offsets.shape[0] - 1
    dim = d_activations.shape[1]
    out = np.zeros((num_segments, dim), dtype=np.float32)
    for s in prange(num_segments):
        for k in range(offsets[s], offsets[s + 1]):
            j = order[k]
            g = gains[j]
            b = sample[j]
            for d in range(dim):
                out[s, d] += g * d_activations[b, d]
    return out


def segment_sum(values: np.ndarray, segments: np.ndarray, num_segments: int) -> np.ndarray:
    """As ``kernels.segment_sum``: per segment, the sum of its rows of ``values`` in order."""
    offsets, order = _csr(segments, num_segments)
    return _sum_rows(values, offsets, order, values.shape[1])


def backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    num_segments: int,
) -> np.ndarray:
    """Per segment, the sum over its occurrences j of ``gains[j] * d_activations[sample[j]]``.

    Spec section 4 in one pass: the contribution of every occurrence is formed and added to its
    row's sum without materialising the [occurrences, D] array of contributions.
    """
    offsets, order = _csr(segments, num_segments)
    return _sum_scaled_rows(d_activations, sample, gains, offsets, order)


# --------------------------------------------------------------------------------------------
# Whole rows


@njit(parallel=True, cache=True)
def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` of ``table`` as a new [n, D] array (as ``table[rows]``)."""
    out = np.empty((rows.shape[0], table.shape[1]), dtype=table.dtype)
    for i in prange(rows.shape[0]):
        out[i, :] = table[rows[i], :]
    return out


@njit(parallel=True, cache=True)
def scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` [n, D] into the distinct rows ``rows`` of ``table`` in place."""
    for i in prange(rows.shape[0]):
        table[rows[i], :] = values[i, :]


@njit(parallel=True, cache=True)
def combine(rows: np.ndarray, gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """As ``kernels.combine``: per bag, the sum of ``gains[j] * rows[j]`` in position order."""
    num_bags = row_splits.shape[0] - 1
    dim = rows.shape[1]
    out = np.zeros((num_bags, dim), dtype=np.float32)
    for b in prange(num_bags):
        for j in range(row_splits[b], row_splits[b + 1]):
            g = gains[j]
            for d in range(dim):
                out[b, d] += g * rows[j, d]
    return out


# --------------------------------------------------------------------------------------------
# The per-row pipeline (spec 6.1-6.4), one kernel per optimizer


@njit(inline="always")
def _clip(x: np.float32, lower: np.float32, upper: np.float32) -> np.float32:
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return x


@njit(inline="always")
def _decay(w: np.float32, decay: np.float32, has_decay: bool) -> np.float32:
    if has_decay:
        w = w - decay * w
    return w


@njit(parallel=True, cache=True)
def update_sgd(
    params: np.ndarray, rows: np.ndarray, grad: np.ndarray, lr: np.float32,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """``w = w - lr * G`` on ``rows``, with clipping and decay (spec 12.1)."""
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(params.shape[1]):
            g = _clip(grad[i, d], g_lo, g_hi)
            w = _decay(params[r, d], decay, has_decay)
            w = w - lr * g
            params[r, d] = _clip(w, w_lo, w_hi)


@njit(parallel=True, cache=True)
def update_adagrad(
    params: np.ndarray, acc: np.ndarray, rows: np.ndarray, grad: np.ndarray, lr: np.float32,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """``acc = acc + G * G; w = w - lr * G / sqrt(acc)`` on ``rows`` (spec 12.2)."""
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(params.shape[1]):
            g = _clip(grad[i, d], g_lo, g_hi)
            w = _decay(params[r, d], decay, has_decay)
            a = acc[r, d] + g * g
            w = w - lr * g / np.sqrt(a)
            acc[r, d] = a
            params[r, d] = _clip(w, w_lo, w_hi)


@njit(parallel=True, cache=True)
def update_momentum(
    params: np.ndarray, mom: np.ndarray, rows: np.ndarray, grad: np.ndarray, lr: np.float32,
    mu: np.float32, nesterov: bool,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """``m = mu * m + G``; ``w = w - lr * m`` or Nesterov's step, on ``rows`` (spec 12.8)."""
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(params.shape[1]):
            g = _clip(grad[i, d], g_lo, g_hi)
            w = _decay(params[r, d], decay, has_decay)
            m = mu * mom[r, d] + g
            if nesterov:
                w = w - (lr * g + lr * mu * m)
            else:
                w = w - lr * m
            mom[r, d] = m
            params[r, d] = _clip(w, w_lo, w_hi)


@njit(parallel=True, cache=True)
def update_adam(
    params: np.ndarray, mom: np.ndarray, vel: np.ndarray, rows: np.ndarray, grad: np.ndarray,
    lr: np.float32, beta1: np.float32, beta2: np.float32, eps: np.float32, sum_inside: bool,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """Adam without bias correction on ``rows`` (spec 12.7)."""
    one_b1 = _ONE - beta1
    one_b2 = _ONE - beta2
    eps2 = eps * eps
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(params.shape[1]):
            g = _clip(grad[i, d], g_lo, g_hi)
            w = _decay(params[r, d], decay, has_decay)
            m = beta1 * mom[r, d] + one_b1 * g
            v = beta2 * vel[r, d] + one_b2 * g * g
            if sum_inside:
                den = np.sqrt(v + eps2)
            else:
                den = np.sqrt(v) + eps
            w = w - lr * m / den
            mom[r, d] = m
            vel[r, d] = v
            params[r, d] = _clip(w, w_lo, w_hi)


@njit(inline="always")
def _pow(x: np.float32, exponent: np.float32) -> np.float32:
    if exponent == _HALF:
        return np.sqrt(x)
    return x**exponent


@njit(parallel=True, cache=True)
def update_ftrl(
    params: np.ndarray, acc: np.ndarray, lin: np.ndarray, rows: np.ndarray, grad: np.ndarray,
    lr: np.float32, l1: np.float32, l2: np.float32, beta: np.float32, exponent: np.float32,
    mlbl: bool,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """FTRL-Proximal on ``rows`` (spec 12.6); ``exponent`` is ``-lr_power``."""
    big_l1 = lr * l1 if mlbl else l1
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(params.shape[1]):
            g = _clip(grad[i, d], g_lo, g_hi)
            w = _decay(params[r, d], decay, has_decay)
            a_old = acc[r, d]
            a_new = a_old + g * g
            dp = _pow(a_new, exponent) - _pow(a_old, exponent)
            p_new = _pow(a_new, exponent)
            if mlbl:
                li = lin[r, d] + lr * g - dp * w
                den = p_new + _TWO * lr * l2 + beta
            else:
                li = lin[r, d] + g - dp * w / lr
                den = (p_new + beta) / lr + _TWO * l2
            if l1 == _ZERO:
                num = -li
            else:
                num = _clip(li, -big_l1, big_l1) - li
            w = _ZERO if den == _ZERO else num / den
            acc[r, d] = a_new
            lin[r, d] = li
            params[r, d] = _clip(w, w_lo, w_hi)

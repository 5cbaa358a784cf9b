"""Compiled (numba) versions of the executor's hot loops; the ``numba`` engine's kernels.

Import this module only through ``tpuemb_cfg.executor.engine``: it imports numba at the top, and
``import tpuemb_cfg``, ``tpuemb validate`` and the NumPy engine must never pay for that.

Every kernel computes what its namesake in ``kernels`` (or the optimizer in ``optimizers``)
computes, in float32, in the same order of operations, so the two engines agree to a few ULP:

- ``deduplicate``: an open-addressing hash table of the ids (sized by the batch, never by the
  vocabulary), then a radix sort of the *unique* ids only, so the result is exactly
  ``np.unique``'s;
- ``segment_sum`` / ``backprop_sum``: one pass over the occurrences in order (the spec's
  reference order within each row), adding each into its row's sum, with no [occurrences, D]
  temporary of contributions;
- ``gather`` / ``scatter`` / ``combine`` / ``gather_combine``: whole rows, parallel over rows
  or bags (``gather_combine`` forms the activations without the gathered copy of the rows);
- ``change_norm``: the report's update norm without temporaries;
- ``update_*``: the whole per-row pipeline of spec section 6 fused into one pass over each
  updated row (gradient clipping, weight decay, the optimizer, weight clipping), in place, so
  every touched parameter and slot is read once and written once.

Scalars arrive as ``np.float32`` and every literal below is a float32 constant, so numba keeps
the arithmetic in float32 (a bare ``1.0`` would promote the expression to float64). Absent clip
bounds are passed as -inf/+inf: ``x < -inf`` is never true, so NaN stays NaN as in ``kernels.clip``.
"""

from __future__ import annotations

import os

# numba's OpenMP workers spin after each parallel loop by default. On a machine whose cores are
# shared with other processes a spinning worker holds a core the next loop needs, and a parallel
# loop of a millisecond then waits for a scheduler time slice (measured: 0.5 ms -> 8 ms). Sleeping
# workers cost a wake-up of tens of microseconds instead. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

__all__ = [
    "backprop_sum",
    "change_norm",
    "combine",
    "deduplicate",
    "gather",
    "gather_combine",
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
def _radix_argsort(keys: np.ndarray) -> np.ndarray:
    """The stable order that sorts the non-negative int64 ``keys``: LSD radix, 11 bits a pass.

    Unique ids are few (tens of thousands) and below the vocabulary size, so two or three
    counting passes beat a comparison sort by an order of magnitude.
    """
    n = keys.shape[0]
    order = np.arange(n)
    if n < 2:
        return order
    top = keys.max()
    buffer = np.empty(n, dtype=np.int64)
    counts = np.empty(2049, dtype=np.int64)
    shift = 0
    while shift == 0 or (top >> shift) > 0:
        counts[:] = 0
        for k in range(n):
            counts[((keys[order[k]] >> shift) & 2047) + 1] += 1
        for b in range(2048):
            counts[b + 1] += counts[b]
        for k in range(n):
            digit = (keys[order[k]] >> shift) & 2047
            buffer[counts[digit]] = order[k]
            counts[digit] += 1
        order, buffer = buffer, order
        shift += 11
    return order


@njit(cache=True)
def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique, inverse)`` as ``kernels.deduplicate``: sorted distinct ids, position per id.

    One pass over the ids with an open-addressing hash table (linear probing, 2n to 4n slots)
    labels each new id in first-appearance order; sorting the u unique ids (u << n for Zipf
    data) and relabelling gives ``np.unique``'s answer in O(n + u) instead of O(n log n).
    Ids must be non-negative (the executor checks them first).
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
    first = first[:count]
    order = _radix_argsort(first)
    unique = np.empty(count, dtype=np.int64)
    rank = np.empty(count, dtype=np.int64)
    for k in range(count):
        unique[k] = first[order[k]]
        rank[order[k]] = k
    for j in range(n):
        inverse[j] = rank[inverse[j]]
    return unique, inverse


@njit(cache=True)
def _segment_sum(values: np.ndarray, segments: np.ndarray, out: np.ndarray) -> None:
    for j in range(values.shape[0]):
        s = segments[j]
        for d in range(values.shape[1]):
            out[s, d] += values[j, d]


@njit(cache=True)
def _backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    out: np.ndarray,
) -> None:
    for j in range(segments.shape[0]):
        s = segments[j]
        g = gains[j]
        b = sample[j]
        for d in range(d_activations.shape[1]):
            out[s, d] += g * d_activations[b, d]


def segment_sum(values: np.ndarray, segments: np.ndarray, num_segments: int) -> np.ndarray:
    """As ``kernels.segment_sum``: per segment, the sum of its rows of ``values`` in order.

    One sequential pass in occurrence order (which is the spec's summation order within every
    segment): ``values`` is streamed once and each row added into its segment's row. The pass
    is bound by memory, not arithmetic, so it is not split over threads.
    """
    out = np.zeros((num_segments, values.shape[1]), dtype=F32)
    _segment_sum(values, segments, out)
    return out


def backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    num_segments: int,
) -> np.ndarray:
    """Per segment, the sum over its occurrences j of ``gains[j] * d_activations[sample[j]]``.

    Spec section 4 in one pass, occurrences in order: each contribution is formed and added to
    its row's sum without materialising the [occurrences, D] array of contributions.
    """
    out = np.zeros((num_segments, d_activations.shape[1]), dtype=F32)
    _backprop_sum(d_activations, sample, gains, segments, out)
    return out


# --------------------------------------------------------------------------------------------
# Whole rows


# Outputs are allocated by NumPy, not inside the kernels: NumPy asks the kernel for huge pages
# for large arrays, so a fresh 16 MB activation array costs a few page faults instead of
# thousands (measured: gather_combine 2.8 ms -> 1.4 ms).


@njit(parallel=True, cache=True)
def _gather(table: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(table.shape[1]):
            out[i, d] = table[r, d]


@njit(parallel=True, cache=True)
def scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` [n, D] into the distinct rows ``rows`` of ``table`` in place."""
    for i in prange(rows.shape[0]):
        r = rows[i]
        for d in range(table.shape[1]):
            table[r, d] = values[i, d]


@njit(parallel=True, cache=True)
def _gather_combine(
    rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray,
    out: np.ndarray,
) -> None:
    for b in prange(row_splits.shape[0] - 1):
        for d in range(rows.shape[1]):
            out[b, d] = _ZERO
        for j in range(row_splits[b], row_splits[b + 1]):
            g = gains[j]
            r = index[j]
            for d in range(rows.shape[1]):
                out[b, d] += g * rows[r, d]


def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` of ``table`` as a new [n, D] array (as ``table[rows]``)."""
    out = np.empty((rows.shape[0], table.shape[1]), dtype=table.dtype)
    _gather(table, rows, out)
    return out


def gather_combine(
    rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
) -> np.ndarray:
    """``combine(gather(rows, index), gains, row_splits)`` without the gathered [nnz, D] copy.

    Per bag b, ``sum over j in the bag of gains[j] * rows[index[j]]``, in position order.
    """
    out = np.empty((row_splits.shape[0] - 1, rows.shape[1]), dtype=F32)
    _gather_combine(rows, index, gains, row_splits, out)
    return out


def combine(rows: np.ndarray, gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """As ``kernels.combine``: per bag, the sum of ``gains[j] * rows[j]`` in position order."""
    return gather_combine(rows, np.arange(rows.shape[0], dtype=np.int64), gains, row_splits)


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def _change_norm_rows(params: np.ndarray, rows: np.ndarray, before: np.ndarray) -> float:
    # A report figure, not part of the step's numbers: letting the compiler reorder this float64
    # sum (and only that: NaN and inf still propagate) vectorises it, 2 ms -> 0.9 ms.
    total = 0.0
    for i in prange(rows.shape[0]):
        r = rows[i]
        row = 0.0
        for d in range(params.shape[1]):
            delta = np.float64(params[r, d] - before[i, d])
            row += delta * delta
        total += row
    return total


def change_norm(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> float:
    """Euclidean norm of ``params[rows] - before`` (every row when ``rows`` is None).

    The difference is taken in float32 and squared and summed in float64, as the NumPy
    executor does, without the [rows, D] temporaries.
    """
    if rows is None:
        rows = np.arange(params.shape[0], dtype=np.int64)
    return float(np.sqrt(_change_norm_rows(params, rows, before)))


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
def _ftrl_element(
    params: np.ndarray, acc: np.ndarray, lin: np.ndarray, r: int, d: int, g: np.float32,
    w: np.float32, a_new: np.float32, p_old: np.float32, p_new: np.float32, lr: np.float32,
    l1: np.float32, big_l1: np.float32, l2: np.float32, beta: np.float32, mlbl: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    dp = p_new - p_old
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
    quotient = num / den
    w = _ZERO if den == _ZERO else quotient
    acc[r, d] = a_new
    lin[r, d] = li
    params[r, d] = _clip(w, w_lo, w_hi)


@njit(parallel=True, cache=True)
def update_ftrl(
    params: np.ndarray, acc: np.ndarray, lin: np.ndarray, rows: np.ndarray, grad: np.ndarray,
    lr: np.float32, l1: np.float32, l2: np.float32, beta: np.float32, exponent: np.float32,
    mlbl: bool,
    g_lo: np.float32, g_hi: np.float32, decay: np.float32, has_decay: bool,
    w_lo: np.float32, w_hi: np.float32,
) -> None:
    """FTRL-Proximal on ``rows`` (spec 12.6); ``exponent`` is ``-lr_power``.

    The usual exponent 0.5 takes exact square roots (as ``optimizers.ftrl``); it gets a loop of
    its own because a ``pow`` call anywhere in a loop keeps the compiler from vectorising it
    (measured: 28 ms -> 3 ms on the anchor workload).
    """
    big_l1 = lr * l1 if mlbl else l1
    if exponent == _HALF:
        for i in prange(rows.shape[0]):
            r = rows[i]
            for d in range(params.shape[1]):
                g = _clip(grad[i, d], g_lo, g_hi)
                w = _decay(params[r, d], decay, has_decay)
                a_old = acc[r, d]
                a_new = a_old + g * g
                _ftrl_element(params, acc, lin, r, d, g, w, a_new, np.sqrt(a_old),
                              np.sqrt(a_new), lr, l1, big_l1, l2, beta, mlbl, w_lo, w_hi)
    else:
        for i in prange(rows.shape[0]):
            r = rows[i]
            for d in range(params.shape[1]):
                g = _clip(grad[i, d], g_lo, g_hi)
                w = _decay(params[r, d], decay, has_decay)
                a_old = acc[r, d]
                a_new = a_old + g * g
                _ftrl_element(params, acc, lin, r, d, g, w, a_new, a_old**exponent,
                              a_new**exponent, lr, l1, big_l1, l2, beta, mlbl, w_lo, w_hi)

"""The compiled step around the optimizer: de-duplication, forward pass and back-propagation.

For one table and one step (spec sections 3-5, accumulation ENABLED: one partial), with the
occurrences j of the table's features in the spec's reference order (features, bags,
positions), ``unique`` the sorted distinct ids and ``inverse[j]`` the position of occurrence
j's id in ``unique``:

``deduplicate(ids) -> (unique, inverse)``
    as ``np.unique(ids, return_inverse=True)``.
``lookup(params, unique, inverse, gains, row_splits) -> activations``
    per bag b, ``A[b] = sum over j in bag b of gains[j] * params[unique[inverse[j]]]``, in
    position order, read straight from the table (no gathered copy of the rows);
    ``inverse=None``: ``unique`` holds the occurrences' ids themselves (``params[unique[j]]``,
    the same rows, so the same sums), and the forward pass needs no de-duplication.
``backprop(d_activations, sample, gains, inverse, rows) -> (grad, finite)``
    per row u, ``G[u] = sum over its occurrences j, in order, of gains[j] * dA[sample[j]]``
    (spec section 4: back-propagation and the duplicate sum in one pass, no [occurrences, D]
    temporary), and whether every sum is finite: the input check of spec section 1 made on the
    sums, a third of the values (a NaN or infinity read makes its row's sum NaN or infinite,
    whatever the gain, and no later addition makes it finite again; a sum can also overflow
    from finite values, so ``False`` means "check the inputs": the caller then looks for the
    first bad value and refuses the step only if there is one; it also checks the rows no
    bag reads). A row's first contribution is stored as is (the sum starts from it, as from 0),
    so the sums need no zeroed array.
    One pass over the occurrences in order, reading the gradient rows in increasing order (the
    hardware prefetches them) and adding each into its row's sum. The alternatives are slower
    (``docs/performance.md``): grouping the occurrences by row first reads the gradient rows in
    random order; two threads taking the occurrences of their own ranges of rows read them with
    gaps and pay the grouping.

``occurrences(d_activations, sample, gains, inverse, rows) -> (Occurrences, finite)``
    the occurrences grouped by row (a stable counting sort: occurrence order within each row)
    for the update to sum each row's gradient itself (``numba_update``: the same float32 sums
    as ``backprop``), and whether every value of ``d_activations`` is finite (``finite``: one
    streaming pass on several threads; the rows of empty bags included).

The sums run in the same order as ``engines.numba``'s one-pass ``backprop_sum`` and
``gather_combine`` (hence the same float32 results). Rows and bags are split into ranges run on
several threads (``numba_update.run_ranges`` and ``parallel``); the kernels are serial,
``nogil`` and use
NumPy's error model, which keeps them small to compile and lets the loops vectorise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..aligned import aligned_empty
from .jit import (
    STREAM_LANES,
    STREAMING,
    njit,
    popcount,
    prefetch,
    store_fence,
    stream_row,
)
from .numba_update import Occurrences, run_ranges

__all__ = ["backprop", "deduplicate", "finite", "lookup", "missing_rows", "occurrences"]

F32 = np.float32
_ZERO = np.float32(0.0)
_EMPTY = np.int64(-1)
_AHEAD = 8  # rows or bags: how far ahead scattered rows are prefetched
# ``deduplicate``: a bitmap (1 bit per possible id) when the ids are below this many per id of
# the batch; its 32 bytes per id at most are the hash table's size (2n to 4n slots of 16 bytes)
_BITMAP_IDS_PER_ID = 256

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: multiply, keep the top bits


@njit(cache=True, error_model="numpy")
def _radix_argsort(keys: np.ndarray) -> np.ndarray:
    """The stable order sorting the non-negative int64 ``keys``: LSD radix, 11 bits a pass.

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


@njit(nogil=True, cache=True, error_model="numpy")
def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique, inverse)`` of the non-negative int64 ``ids``, as ``np.unique``'s.

    Ids below ``_BITMAP_IDS_PER_ID`` times the batch size (the usual case: a table's
    vocabulary is rarely much larger than 256 batches) go through a bitmap with one bit per
    possible id (``_bitmap_deduplicate``): a few kilobytes to a few hundred that the caches
    hold. Larger ids go through a hash table sized by the batch (``_hash_deduplicate``), the
    slower of the two (``docs/performance.md``).
    """
    n = ids.shape[0]
    top = np.int64(-1)
    for j in range(n):
        top = max(top, ids[j])
    if top < _BITMAP_IDS_PER_ID * n:
        return _bitmap_deduplicate(ids, top)
    return _hash_deduplicate(ids)


@njit(nogil=True, cache=True, error_model="numpy")
def _bitmap_deduplicate(ids: np.ndarray, top: np.int64) -> tuple[np.ndarray, np.ndarray]:
    """``deduplicate`` through a bitmap of ids ``0..top``: set each id's bit (one pass), count
    the bits of each 64-bit word before it (``starts``), list the set bits in increasing order
    (the unique ids), then an id's rank is its word's start plus the bits set below it in the
    word (one more pass: ``inverse``)."""
    n = ids.shape[0]
    words = (top >> 6) + 1
    bits = np.zeros(words, dtype=np.uint64)
    one = np.uint64(1)
    for j in range(n):
        key = ids[j]
        bits[key >> 6] |= one << np.uint64(key & 63)
    starts = np.empty(words, dtype=np.int64)
    count = 0
    for w in range(words):
        starts[w] = count
        count += popcount(bits[w])
    unique = np.empty(count, dtype=np.int64)
    k = 0
    for w in range(words):
        word = bits[w]
        while word != 0:
            lowest = word & (~word + one)
            unique[k] = (w << 6) + popcount(lowest - one)
            k += 1
            word ^= lowest
    inverse = np.empty(n, dtype=np.int64)
    for j in range(n):
        key = ids[j]
        w = key >> 6
        below = (one << np.uint64(key & 63)) - one
        inverse[j] = starts[w] + popcount(bits[w] & below)
    return unique, inverse


@njit(nogil=True, cache=True, error_model="numpy")
def _hash_deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``deduplicate`` for any non-negative ids. One pass over the ids with an open-addressing
    hash table (linear probing, 2n to 4n slots, sized by the batch, never by the vocabulary)
    labels each new id in first-appearance order; a radix sort of the u unique ids relabels
    them in increasing order: O(n + u) instead of a sort of every id."""
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


@njit(inline="always")
def _not_done(done: np.ndarray, row: int) -> bool:
    return (done[row >> 3] >> (row & 7)) & 1 == 0


@njit(nogil=True, cache=True)
def missing_rows(done: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The sorted distinct ``ids`` whose bit in the ``done`` bitmap (``state.Pending.done``: bit
    ``r & 7`` of byte ``r >> 3``) is 0: the default rows a forward pass by id must compute first
    (``LocalStorage.live_params``), usually none after the first steps. Compiled and without
    the GIL."""
    count = 0
    for j in range(ids.shape[0]):
        if _not_done(done, ids[j]):
            count += 1
    found = np.empty(count, dtype=np.int64)
    count = 0
    for j in range(ids.shape[0]):
        if _not_done(done, ids[j]):
            found[count] = ids[j]
            count += 1
    return np.unique(found)


@njit(inline="always")
def _by_inverse(unique: np.ndarray, inverse: np.ndarray, j: int) -> int:
    return unique[inverse[j]]


@njit(inline="always")
def _by_id(ids: np.ndarray, inverse: np.ndarray, j: int) -> int:
    return ids[j]


@njit(inline="always")
def _combine(
    row: Any, params: np.ndarray, unique: np.ndarray, inverse: np.ndarray, gains: np.ndarray,
    row_splits: np.ndarray, out: np.ndarray, stream: bool, start: int, stop: int,
) -> float:
    """The activations of bags ``start:stop``; ``row(unique, inverse, j)``: occurrence j's row
    (``_by_inverse``, ``_by_id``: each kernel inlines its own). Each bag's sum is formed in a
    small buffer that stays in the first-level cache, then written out once: with ``stream``,
    by streaming stores (``jit.stream_row``; ``out`` aligned, the dimension a multiple of 8)."""
    dim = out.shape[1]
    acc = np.empty(dim, dtype=np.float32)
    end = row_splits[stop] - _AHEAD  # occurrences whose row is asked for _AHEAD ahead
    for b in range(start, stop):
        first, last = row_splits[b], row_splits[b + 1]
        if first == last:
            for d in range(dim):
                acc[d] = _ZERO
        else:
            # The first product as is (as NumPy's reduceat starts), then the others added.
            if first < end:
                prefetch(params, row(unique, inverse, first + _AHEAD))
            g = gains[first]
            r = row(unique, inverse, first)
            for d in range(dim):
                acc[d] = g * params[r, d]
            for j in range(first + 1, last):
                if j < end:
                    prefetch(params, row(unique, inverse, j + _AHEAD))
                g = gains[j]
                r = row(unique, inverse, j)
                for d in range(dim):
                    acc[d] += g * params[r, d]
        if stream:
            stream_row(out, b, acc)
        else:
            for d in range(dim):
                out[b, d] = acc[d]
    if stream:
        store_fence()
    return 0.0


@njit(nogil=True, cache=True, error_model="numpy")
def _lookup(
    params: np.ndarray, unique: np.ndarray, inverse: np.ndarray, gains: np.ndarray,
    row_splits: np.ndarray, out: np.ndarray, stream: bool, start: int, stop: int,
) -> float:
    return _combine(_by_inverse, params, unique, inverse, gains, row_splits, out, stream, start,
                    stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _lookup_ids(
    params: np.ndarray, ids: np.ndarray, inverse: np.ndarray, gains: np.ndarray,
    row_splits: np.ndarray, out: np.ndarray, stream: bool, start: int, stop: int,
) -> float:
    return _combine(_by_id, params, ids, inverse, gains, row_splits, out, stream, start, stop)


def lookup(
    params: np.ndarray, unique: np.ndarray, inverse: np.ndarray | None, gains: np.ndarray,
    row_splits: np.ndarray,
) -> np.ndarray:
    """The activations [bags, D] of one feature (module docstring); bags split over threads."""
    bags = row_splits.shape[0] - 1
    # On a cache line (``aligned``), so every row of a dimension that is a multiple of 8 can be
    # written by aligned streaming stores. NumPy asks the kernel for huge pages for large
    # arrays: a fresh 16 MB array costs a few page faults instead of thousands.
    out = aligned_empty((bags, params.shape[1]))
    stream = STREAMING and params.shape[1] % STREAM_LANES == 0
    kernel, index = (_lookup_ids, unique) if inverse is None else (_lookup, inverse)
    run_ranges(kernel, bags, index.shape[0] * params.shape[1],
               params, unique, index, gains, row_splits, out, stream)
    return out


@njit(nogil=True, cache=True, error_model="numpy")
def _group(
    inverse: np.ndarray, sample: np.ndarray, gains: np.ndarray, rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stable counting sort of the occurrences by ``inverse``: ``starts`` [rows + 1] and the
    occurrences' ``sample`` and ``gains`` grouped by row, in occurrence order within each."""
    n = inverse.shape[0]
    starts = np.zeros(rows + 1, dtype=np.int64)
    for j in range(n):
        starts[inverse[j] + 1] += 1
    for u in range(rows):
        starts[u + 1] += starts[u]
    fill = starts[:rows].copy()
    grouped_sample = np.empty(n, dtype=np.int64)
    grouped_gains = np.empty(n, dtype=np.float32)
    for j in range(n):
        u = inverse[j]
        m = fill[u]
        fill[u] = m + 1
        grouped_sample[m] = sample[j]
        grouped_gains[m] = gains[j]
    return starts, grouped_sample, grouped_gains


@njit(nogil=True, cache=True, error_model="numpy")
def _not_finite(values: np.ndarray, start: int, stop: int) -> float:
    checks = np.zeros(values.shape[1], dtype=np.float32)
    for b in range(start, stop):
        for d in range(values.shape[1]):
            # x - x is 0 for a finite x and NaN for NaN and +-inf: the input check, per value.
            checks[d] += values[b, d] - values[b, d]
    return np.float64(checks.sum())


def finite(values: np.ndarray) -> bool:
    """Whether every value of the float32 C-contiguous [n, D] ``values`` is finite (one
    streaming pass, rows split over threads)."""
    return run_ranges(_not_finite, values.shape[0], values.size, values) == 0.0


def occurrences(
    d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray, inverse: np.ndarray,
    rows: int,
) -> tuple[Occurrences, bool]:
    """``(occurrences, finite)`` (module docstring): back-propagation's inputs grouped by row
    for the fused update, and whether every value of ``d_activations`` is finite."""
    starts, grouped_sample, grouped_gains = _group(inverse, sample, gains, rows)
    grouped = Occurrences(starts, grouped_sample, grouped_gains, d_activations)
    return grouped, finite(d_activations)


@njit(nogil=True, cache=True, error_model="numpy")
def _backprop(
    d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray, inverse: np.ndarray,
    out: np.ndarray,
) -> None:
    dim = out.shape[1]
    seen = np.zeros(out.shape[0], dtype=np.bool_)
    count = inverse.shape[0]
    for j in range(count):
        if j + _AHEAD < count:  # the sums are scattered; ``sample`` only increases
            prefetch(out, inverse[j + _AHEAD])
        u = inverse[j]
        g = gains[j]
        b = sample[j]
        if seen[u]:
            for d in range(dim):
                out[u, d] += g * d_activations[b, d]
        else:  # the row's first contribution as is (the sum from 0: 0 + x is x)
            seen[u] = True
            for d in range(dim):
                out[u, d] = g * d_activations[b, d]


def backprop(
    d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray, inverse: np.ndarray,
    rows: int,
) -> tuple[np.ndarray, bool]:
    """``(grad [rows, D], finite)`` (module docstring), in one pass on the calling thread
    (several tables: on several threads, ``numba_update.parallel``), then the input check on
    the sums (``finite``, on this thread: the sums are still in the caches)."""
    out = aligned_empty((rows, d_activations.shape[1]))  # whole cache lines per row
    _backprop(d_activations, sample, gains, inverse, out)
    return out, _not_finite(out, 0, rows) == 0.0

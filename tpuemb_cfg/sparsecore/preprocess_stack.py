"""jax-tpu-embedding's preprocessing of one stacked table (steps 2-7 of
:mod:`tpuemb_cfg.sparsecore.preprocessing`): entries, gains, sort and merge, statistics, limits,
and the CSR buffer."""

from __future__ import annotations

import mmap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.sparsecore.preprocess_input import (
    _INT32_MAX,
    COMBINERS,
    MINIBATCHES,
    BoolArray,
    F32Array,
    IntArray,
    SparseCoreInputError,
    SparseCoreLimitError,
    _Feature,
    _Options,
    _round8,
    buffer_sizes,
)
from tpuemb_cfg.sparsecore.results import PreprocessedStack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, Stacking

# ---------------------------------------------------------------- one stacked table

@dataclass(frozen=True)
class _Sizes:
    """A stack's limits (after ``limits``) and buffer sizes."""

    max_ids: int
    max_unique: int
    theoretical: int
    coo_size: int


def _check_stack(stack: Stack, opts: _Options) -> _Sizes:
    """The stack's combiner checked, its limits chosen and its buffer sized."""
    if stack.combiner not in COMBINERS:
        raise SparseCoreInputError(
            f"stacked table {stack.name!r}: combiner {stack.combiner!r} is not one of "
            f"{', '.join(COMBINERS)} (jax-tpu-embedding computes its gains as for 'sum' "
            "without a warning)", reason="combiner", stack=stack.name)
    max_ids, max_unique = opts.limits.get(
        stack.name, (stack.max_ids_per_partition, stack.max_unique_ids_per_partition))
    theoretical, coo_size = buffer_sizes(
        stack, global_devices=opts.global_devices, sparse_cores_per_device=opts.sparse_cores,
        max_ids_per_partition=max_ids, enable_minibatching=opts.minibatching)
    return _Sizes(max_ids, max_unique, theoretical, coo_size)


def _count(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
           opts: _Options, sizes: _Sizes, kernels: Any = None,
           csr: bool = True, compiled: Any = None) -> tuple[Any, _Stats]:
    """Steps 1-6, then the limit check when ids may not be dropped (with minibatching an
    exceeded limit means a split instead: :func:`_preprocess_split`).

    ``kernels`` is the compiled engine (``preprocess_kernels``) or None (this module's NumPy);
    the first value returned is a :class:`_Merged` from NumPy, the compiled engine's own record
    (with ``finish`` and ``merged``) from the kernels, which may write the CSR arrays (when
    ``csr``) already; ``compiled`` is that record when the kernels ran already (every stack
    at once: ``preprocess_kernels.sort_merge_stacks``)."""
    for slot in slots:
        _check_rows(stack, slot, inputs[slot.name], opts)
    if kernels is None:
        merged: Any = _merge(_entries(stack, slots, inputs, opts), opts.num_sparse_cores)
        stats = _statistics(merged, opts)
    else:
        merged = compiled if compiled is not None else kernels.sort_merge(
            stack, slots, inputs, opts, sizes, csr)
        stats = (_statistics(merged, opts) if isinstance(merged, _Merged) else
                 _stats_of_counts(merged.entries, merged.distinct, opts))
    if not opts.allow_id_dropping and not opts.minibatching:
        _check_limits(stack, stats, sizes.max_ids, sizes.max_unique, opts)
    return merged, stats


def _check_rows(stack: Stack, slot: FeatureSlot, feature: _Feature, opts: _Options) -> None:
    """Each SparseCore takes an equal slice of a feature's rows (step 1)."""
    if feature.rows % opts.local_sparse_cores:
        raise SparseCoreInputError(
            f"feature {slot.name!r} (stacked table {stack.name!r}): its batch of "
            f"{feature.rows} rows does not divide into {opts.local_devices} local devices "
            f"x {opts.sparse_cores} SparseCores; each SparseCore takes an equal slice of "
            f"rows - use a batch that is a multiple of {opts.local_sparse_cores} "
            "(jax-tpu-embedding aborts when a device's rows do not divide by its SparseCores, "
            "and ignores the rows left over when the batch does not divide by the devices)",
            reason="batch", stack=stack.name)


def _split_needed(stacking: Stacking, counted: Mapping[str, tuple[_Merged, _Stats]],
                  sizes: Mapping[str, _Sizes]) -> bool:
    """With minibatching, jax-tpu-embedding keeps the batch in one minibatch unless some stack
    sends more ids (or distinct ids) to a partition than its limits allow
    (:func:`_preprocess_split` then splits every stack)."""
    for stack in stacking.stacks:
        stats, size = counted[stack.name][1], sizes[stack.name]
        if (int(stats.entries.max(initial=0)) > size.max_ids or
                int(stats.distinct.max(initial=0)) > size.max_unique):
            return True
    return False


def _finish(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
            opts: _Options, sizes: _Sizes, merged: Any, stats: _Stats,
            csr: bool = True) -> PreprocessedStack:
    """Steps 7-9: drops, the CSR arrays (without ``csr``: empty, :func:`_no_csr`) and the
    per-id drop flags."""
    if not isinstance(merged, _Merged):  # the compiled engine's record
        result: PreprocessedStack = merged.finish(stack, slots, inputs, opts, sizes, stats, csr)
        return result
    kept = _drop(merged, stats, sizes.max_ids, sizes.max_unique,
                 sizes.coo_size // opts.sparse_cores, opts)
    dropped_raw = np.empty(merged.order.shape[0], bool)
    dropped_raw[merged.order] = ~kept.keep[merged.group]
    return _result(stack, sizes, stats, kept.drop_count,
                   _csr(merged, kept, sizes.coo_size, opts) if csr else _no_csr(opts),
                   _per_feature(dropped_raw, slots, inputs))


def _per_feature(dropped_raw: BoolArray, slots: Sequence[FeatureSlot],
                 inputs: Mapping[str, _Feature]) -> dict[str, BoolArray]:
    """The drop flags of the stack's ids (features laid end to end) cut per feature."""
    per_feature: dict[str, BoolArray] = {}
    start = 0
    for slot in slots:
        n = inputs[slot.name].values.shape[0]
        per_feature[slot.name] = dropped_raw[start:start + n]
        start += n
    return per_feature


def _result(stack: Stack, sizes: _Sizes, stats: _Stats, drop_count: int, csr: _Csr,
            dropped: dict[str, BoolArray]) -> PreprocessedStack:
    return PreprocessedStack(
        stack=stack.name,
        max_ids_per_partition=stats.max_ids,
        max_unique_ids_per_partition=stats.max_unique,
        required_buffer_size_per_sc=stats.required,
        id_drop_count=drop_count,
        coo_buffer_size_per_device=sizes.coo_size,
        row_pointers=csr.row_pointers, embedding_ids=csr.embedding_ids,
        sample_ids=csr.sample_ids, gains=csr.gains, valid_mask=csr.valid_mask,
        padding_mask=csr.padding_mask, dropped=dropped,
        theoretical_max_coo_buffer_size=sizes.theoretical)


@dataclass(frozen=True)
class _Entries:
    """Every id of a stack in input order: its SparseCore (``d S + s``), partition, embedding
    id, sample and gain."""

    core: IntArray
    partition: IntArray
    column: IntArray
    sample: IntArray
    gain: F32Array


def _entries(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
             opts: _Options) -> _Entries:
    """Steps 1-3 of the module docstring for each feature, concatenated in ``row_offset``
    order (so a stable sort keeps each SparseCore's input order)."""
    n, cores = opts.num_sparse_cores, opts.local_sparse_cores
    parts: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []
    gains: list[F32Array] = []
    offset = 0
    for slot in slots:
        feature = inputs[slot.name]
        per_core = feature.rows // cores
        lengths = np.diff(feature.row_splits)
        row = np.repeat(np.arange(feature.rows, dtype=np.int64), lengths)
        x = feature.values
        parts.append((row // per_core, (x + slot.col_shift) & (n - 1),
                      x // n + slot.col_offset // n, row % per_core + offset))
        gains.append(_gains(stack.combiner, feature, lengths, row))
        offset += per_core
    if not parts:
        empty = np.zeros(0, np.int64)
        return _Entries(empty, empty, empty, empty, np.zeros(0, np.float32))
    if len(parts) == 1:
        core, partition, column, sample = parts[0]
        return _Entries(core, partition, column, sample, gains[0])
    core, partition, column, sample = (np.concatenate(p) for p in zip(*parts, strict=True))
    return _Entries(core, partition, column, sample, np.concatenate(gains))


def _gains(combiner: str, feature: _Feature, lengths: IntArray, row: IntArray) -> F32Array:
    """Per id ``w / D`` in float32 (step 3): D = 1, sum(w) or sqrt(sum(w^2)) over its row.

    The sums run left to right from 0 in float32, as the reference's C++ loop does; its sum of
    squares is contracted into fused multiply-adds, ``acc = fma(w, w, acc)`` (one rounding per
    term, not two): the stored gains of every sqrtn case match only that way.
    """
    w = feature.weights
    if w is None:
        w = np.ones(feature.values.shape[0], np.float32)
    if combiner == "sum":
        return w.copy()
    total = _ordered_sums(w, feature.row_splits[:-1], lengths, start_at_zero=True,
                          squares=combiner == "sqrtn")
    if combiner == "sqrtn":
        total = np.sqrt(total)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F32Array = (w / total[row]).astype(np.float32, copy=False)
    return out


def _ordered_sums(values: F32Array, starts: IntArray, lengths: IntArray, *,
                  start_at_zero: bool, squares: bool = False) -> F32Array:
    """Per segment ``values[start:start + length]`` summed in float32 left to right, one
    rounding per term (``((v0 + v1) + v2) + ...``, from 0 when ``start_at_zero``), as a
    sequential C++ loop adds; with ``squares`` the sum of ``v^2`` by fused multiply-adds
    (:func:`_fma32`).

    Pairwise summation (``np.add.reduceat``) rounds differently from the eighth term on; here
    the j-th terms of all segments still that long are added in one vectorised step, for
    j = 0, 1, ..., so the work is the number of values plus one step per position.
    """
    total = np.zeros(starts.shape[0], np.float32)
    first = 0
    if not start_at_zero and not squares:
        total[lengths > 0] = values[starts[lengths > 0]]
        first = 1
    active = np.flatnonzero(lengths > first)
    j = first
    with np.errstate(invalid="ignore", over="ignore"):
        while active.size:
            v = values[starts[active] + j]
            if squares:
                total[active] = _fma32(v, v, total[active])
            else:
                total[active] += v
            j += 1
            active = active[lengths[active] > j]
    return total


def _fma32(a: F32Array, b: F32Array, c: F32Array) -> F32Array:
    """``a x b + c`` rounded once to float32, as C's ``fmaf``.

    The product of two float32 is exact in float64; the float64 sum is made exact-or-odd
    (round to odd: when the addition was inexact and its last bit is even, step one ulp toward
    the lost remainder), and a float64 rounded to odd then rounded to float32 is the correctly
    rounded result, since float64 carries more than 24 + 2 bits.
    """
    x = a.astype(np.float64) * b.astype(np.float64)
    y = c.astype(np.float64)
    s = x + y
    back = s - x
    error = (x - (s - back)) + (y - back)  # Knuth's TwoSum: x + y = s + error exactly
    even = (s.view(np.int64) & 1) == 0
    inexact = (error != 0) & even & np.isfinite(s)
    s[inexact] = np.nextafter(s[inexact], np.copysign(np.inf, error[inexact]))
    out: F32Array = s.astype(np.float32)
    return out


@dataclass(frozen=True)
class _Merged:
    """The stack's entries after step 4: one per (SparseCore, partition, embedding id, sample),
    in sorted order. ``order`` sorts the raw ids, ``group`` maps each sorted raw id to its merged
    entry, ``count`` is the raw ids merged into each entry, ``run`` its (SparseCore, partition)
    run ``core x N + partition``, ``new_column`` marks an entry whose embedding id differs from
    the previous entry's in the run."""

    order: IntArray
    group: IntArray
    count: IntArray
    run: IntArray
    column: IntArray
    sample: IntArray
    gain: F32Array
    new_column: BoolArray


def _sort(run: IntArray, column: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """The permutation sorting by (run, column, input position), and run and column sorted.

    When the three fit in 63 bits they are packed into one int64 key and sorted with
    ``np.sort`` (NumPy's vectorised sort, about ten times faster than a stable ``argsort``);
    the position in the low bits makes the keys distinct, so the order is the stable one, and
    the sorted keys give back the sorted run and column without gathering them.
    """
    count = run.shape[0]
    if not count:
        return run, run, column
    column_bits = int(column.max()).bit_length()
    position_bits = max(1, (count - 1).bit_length())
    if int(run.max()).bit_length() + column_bits + position_bits > 63:
        stable = np.lexsort((np.arange(count), column, run))
        return stable, run[stable], column[stable]
    key = (run << column_bits | column) << position_bits
    key |= np.arange(count, dtype=np.int64)
    key.sort()
    order: IntArray = key & ((1 << position_bits) - 1)
    key >>= position_bits
    return order, key >> column_bits, key & ((1 << column_bits) - 1)


def _merge(e: _Entries, n: int) -> _Merged:
    """Sort by (SparseCore, partition, embedding id, input position) and merge equal
    (SparseCore, partition, embedding id, sample) neighbours, summing gains in order."""
    order, run, column = _sort(e.core * n + e.partition, e.column)
    sample = e.sample[order]
    new_column = np.ones(order.shape[0], bool)
    new_column[1:] = (run[1:] != run[:-1]) | (column[1:] != column[:-1])
    new_entry = new_column.copy()
    new_entry[1:] |= sample[1:] != sample[:-1]
    starts = np.flatnonzero(new_entry)
    group = np.cumsum(new_entry) - 1
    count = np.diff(np.append(starts, order.shape[0]))
    gain = _ordered_sums(e.gain[order], starts, count, start_at_zero=False)
    return _Merged(order, group, count, run[starts], column[starts],
                   sample[starts], gain, new_column[starts])


@dataclass(frozen=True)
class _Stats:
    entries: IntArray  # [cores, N] merged entries per run
    distinct: IntArray  # [cores, N] distinct embedding ids per run
    max_ids: npt.NDArray[np.int32]  # [L, N]
    max_unique: npt.NDArray[np.int32]  # [L, N]
    required: npt.NDArray[np.int32]  # [L, S]


def _statistics(m: _Merged, opts: _Options) -> _Stats:
    """Step 5: counts per (SparseCore, partition) run, the per-device maxima and the required
    buffer ``sum_p roundup8(count)`` per SparseCore."""
    runs = opts.local_sparse_cores * opts.num_sparse_cores
    return _stats_of_counts(np.bincount(m.run, minlength=runs),
                            np.bincount(m.run[m.new_column], minlength=runs), opts)


def _stats_of_counts(entries: IntArray, distinct: IntArray, opts: _Options) -> _Stats:
    """:class:`_Stats` of the merged entries and distinct embedding ids per run."""
    n, cores = opts.num_sparse_cores, opts.local_sparse_cores
    entries = entries.reshape(cores, n)
    distinct = distinct.reshape(cores, n)
    shape = (opts.local_devices, opts.sparse_cores, n)
    return _Stats(entries, distinct,
                  entries.reshape(shape).max(axis=1).astype(np.int32),
                  distinct.reshape(shape).max(axis=1).astype(np.int32),
                  _round8(entries).sum(axis=1).reshape(shape[:2]).astype(np.int32))


def _check_limits(stack: Stack, stats: _Stats, max_ids: int, max_unique: int,
                  opts: _Options) -> None:
    """Without ``allow_id_dropping``: the error jax-tpu-embedding aborts with, for the largest
    count over the batch (ids first, as the reference checks them first)."""
    for counts, limit, name in ((stats.entries, max_ids, "max_ids_per_partition"),
                                (stats.distinct, max_unique, "max_unique_ids_per_partition")):
        observed = int(counts.max()) if counts.size else 0
        if observed <= limit:
            continue
        core, partition = (int(v) for v in np.unravel_index(int(np.argmax(counts)),
                                                             counts.shape))
        device, sc = divmod(core, opts.sparse_cores)
        tables = tuple(t.name for t in stack.tables)
        what = "ids" if name == "max_ids_per_partition" else "distinct ids"
        raise SparseCoreLimitError(
            f"stacked table {stack.name!r} (tables {', '.join(tables)}): SparseCore {sc} of "
            f"local device {device} sends {observed} {what} to partition {partition}, more than "
            f"{name} = {limit} (the most anywhere in this batch); set allow_id_dropping=True "
            f"to drop the excess ids, or raise {name} of {stack.name!r} to at least {observed} "
            "(jax-tpu-embedding aborts the process here)",
            stack=stack.name, tables=tables, limit_name=name, observed=observed, limit=limit,
            where=(device, sc, partition),
            per_sparse_core=counts.max(axis=1).reshape(opts.local_devices, opts.sparse_cores))


@dataclass(frozen=True)
class _Kept:
    """Which merged entries are written (steps 6-7), how many per run, and the id drop count
    (a limit drop counts every raw id of the entry, a buffer drop the entry once, as
    jax-tpu-embedding's counter does)."""

    keep: BoolArray
    written: IntArray  # [cores, N]
    drop_count: int


def _rank_in_run(flags: BoolArray, run: IntArray, runs: int) -> IntArray:
    """1-based rank of each entry among the flagged entries of its run (runs are contiguous
    and ascending), counting the entry itself when flagged."""
    running = np.cumsum(flags, dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(np.bincount(run[flags], minlength=runs))))
    rank: IntArray = running - before[run]
    return rank


def _drop(m: _Merged, stats: _Stats, max_ids: int, max_unique: int, capacity: int,
          opts: _Options) -> _Kept:
    runs = stats.entries.size
    keep = np.ones(m.run.shape[0], bool)
    drop_count = 0
    if opts.allow_id_dropping:
        rank = _rank_in_run(keep, m.run, runs)
        unique_rank = _rank_in_run(m.new_column, m.run, runs)
        keep = (rank <= max_ids) & (unique_rank <= max_unique)
        drop_count += int(m.count[~keep].sum())
    kept = np.bincount(m.run[keep], minlength=runs).reshape(stats.entries.shape)
    written = _room(kept, capacity, opts)
    if int(written.sum()) < int(kept.sum()):
        fits = _rank_in_run(keep, m.run, runs) <= written.reshape(-1)[m.run]
        drop_count += int((keep & ~fits).sum())
        keep &= fits
    return _Kept(keep, written, drop_count)


def _room(kept: IntArray, capacity: int, opts: _Options) -> IntArray:
    """The entries each (SparseCore, partition) run writes of the ``kept`` ``[cores, N]``.

    Partition p starts at sum_{q<p} roundup8(kept_q): while that is within the room the run
    keeps min(kept, room); past it nothing fits (the room is a multiple of 8). With
    minibatching (one minibatch) a device's SparseCores write one after the other into the
    device's whole buffer, so the sums run over the device's (SparseCore, partition) runs."""
    per_row = opts.sparse_cores if opts.minibatching else 1  # SparseCores sharing a sequence
    rows: IntArray = kept.reshape(opts.local_sparse_cores // per_row, -1)
    room = capacity * per_row
    start = np.cumsum(_round8(rows), axis=1) - _round8(rows)
    written: IntArray = np.clip(room - start, 0, rows).reshape(kept.shape)
    return written


@dataclass(frozen=True)
class _Csr:
    row_pointers: npt.NDArray[np.int32]
    embedding_ids: npt.NDArray[np.int32]
    sample_ids: npt.NDArray[np.int32]
    gains: F32Array
    valid_mask: BoolArray
    padding_mask: BoolArray


def _csr(m: _Merged, kept: _Kept, coo_size: int, opts: _Options) -> _Csr:
    """The CSR arrays (:func:`_layout`, :func:`_fill`) of the kept entries."""
    pointers, base = _layout(kept.written, coo_size, opts)
    # The kept entries, in sorted order, are each run's written entries in turn.
    every = bool(kept.keep.all())
    runs, column, sample, gain = (a if every else a[kept.keep]
                                  for a in (m.run, m.column, m.sample, m.gain))
    flat = kept.written.reshape(-1)
    first = np.cumsum(flat) - flat
    where = base.reshape(-1)[runs] - first[runs]
    where += np.arange(runs.shape[0], dtype=np.int64)
    ends = base.reshape(-1) + flat  # each run's end in the flat buffer of all devices
    return _fill(pointers, (where, column, sample, gain), _padding(ends),
                 opts.local_devices * coo_size, opts)


def _layout(written: IntArray, coo_size: int, opts: _Options) -> tuple[IntArray, IntArray]:
    """The row pointers and each run's first slot in the flat buffer of all local devices.

    Per device ``S`` segments of ``coo_size / S`` entries; SparseCore s writes partition p
    from ``start[p] = sum_{q<p} roundup8(written_q)`` and its row-pointer slot p holds the end;
    slots N..max(N, 8)-1 repeat roundup8 of the last end. The slots from each run's end to the
    next multiple of 8 are padding (:func:`_fill`); the slots never written are 0."""
    n, cores, devices = opts.num_sparse_cores, opts.local_sparse_cores, opts.local_devices
    capacity = coo_size // opts.sparse_cores
    if opts.minibatching:  # one sequence per device, pointers absolute (see the docs)
        by_device = _round8(written).reshape(devices, -1)
        start = (np.cumsum(by_device, axis=1) - by_device).reshape(cores, n)
        base = start + np.arange(devices).repeat(opts.sparse_cores)[:, None] * coo_size
    else:
        start = np.cumsum(_round8(written), axis=1) - _round8(written)
        base = start + np.arange(cores)[:, None] * capacity
    ends = start + written
    slots = max(n, 8)
    pointers = np.zeros((cores, slots * (MINIBATCHES if opts.minibatching else 1)), np.int64)
    pointers[:, :n] = ends
    pointers[:, n:slots] = _round8(ends[:, -1:])
    if opts.minibatching:  # each SparseCore's slots one after the other, the rest unused (0)
        pointers = pointers[:, :slots].reshape(devices, -1)
        pointers = np.concatenate(
            [pointers, np.zeros((devices, (MINIBATCHES - 1) * slots * opts.sparse_cores),
                                np.int64)], axis=1)
    return pointers, base


def _no_csr(opts: _Options) -> _Csr:
    """What ``preprocess(..., csr=False)`` returns for the CSR arrays: each empty (size 0 in
    the layout's last dimension), with the dtypes of the real ones."""
    shape = (opts.local_devices, 0) if opts.has_leading_dimension else (0,)
    return _Csr(np.zeros(shape, np.int32), np.zeros(shape, np.int32), np.zeros(shape, np.int32),
                np.zeros(shape, np.float32), np.zeros(shape, bool), np.zeros(shape, bool))


def _padding(ends: IntArray) -> IntArray:
    """The slots jax-tpu-embedding pads after each partition's run: from the run's end up to
    the next multiple of 8 (a run ends at most at its segment's end, itself a multiple of 8,
    so the padding never leaves the segment; an empty run starts aligned and pads nothing)."""
    count = _round8(ends) - ends
    first = np.repeat(ends, count)
    step = np.arange(first.shape[0], dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    out: IntArray = first + step
    return out


def _fill(pointers: IntArray, entries: tuple[npt.NDArray[Any], ...], padding: IntArray,
          total: int, opts: _Options) -> _Csr:
    """The CSR arrays of ``total`` slots: the written entries at ``entries[0]``, the padding
    slots as jax-tpu-embedding writes them (embedding and sample id 2^31 - 1, gain NaN), the
    slots it never writes 0 (it leaves them uninitialised)."""
    where, column, sample, gain = entries
    embedding_ids, sample_ids, gains, valid, padded = _csr_zeros(total)
    embedding_ids[padding] = _INT32_MAX
    sample_ids[padding] = _INT32_MAX
    gains[padding] = np.nan
    padded[padding] = True
    embedding_ids[where] = column
    sample_ids[where] = sample
    gains[where] = gain
    valid[where] = True
    return _shaped(pointers, embedding_ids, sample_ids, gains, valid, padded, opts=opts)


def _csr_zeros(total: int) -> tuple[npt.NDArray[Any], ...]:
    """The five flat CSR arrays of ``total`` slots, zero: embedding ids, sample ids, gains,
    valid and padding masks (:func:`_zeros`)."""
    return (_zeros(total, np.int32), _zeros(total, np.int32), _zeros(total, np.float32),
            _zeros(total, np.bool_), _zeros(total, np.bool_))


def _zeros(count: int, dtype: type) -> npt.NDArray[Any]:
    """``np.zeros(count, dtype)``, in an anonymous memory map when large.

    A COO buffer is sized for the limits (``max_ids_per_partition`` 8,192 on 32 devices x 2
    SparseCores: 33M slots per array) while a batch writes a few percent of it, at the start of
    each SparseCore's segment. NumPy asks the kernel for transparent huge pages on arrays of 4
    MB and more; touching one byte of a huge page then zeroes all 2 MB of it, and with
    ``defrag=madvise`` (the usual setting) may first compact memory: 0.1-1.5 s for the five
    arrays of that buffer, against 0.02 s in 4 KB pages, which only the written slots fault in.
    Below 32 MiB (the C library's largest threshold for serving an allocation from its own
    mapping) ``np.zeros`` is kept: its memory may be reused from the heap, without faults.
    """
    dt = np.dtype(dtype)
    if count * dt.itemsize < 32 << 20:
        return np.zeros(count, dt)
    return np.frombuffer(mmap.mmap(-1, count * dt.itemsize), dt, count=count)


def _shaped(pointers: IntArray, *arrays: npt.NDArray[Any], opts: _Options) -> _Csr:
    """The CSR arrays in the layout asked for (``has_leading_dimension``), pointers as int32."""
    shape = (opts.local_devices, -1) if opts.has_leading_dimension else (-1,)
    ids, samples, gains, valid, padded = (a.reshape(shape) for a in arrays)
    return _Csr(pointers.astype(np.int32).reshape(shape), ids, samples, gains, valid, padded)

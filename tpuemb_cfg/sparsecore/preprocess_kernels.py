"""The ``numba`` engine of SparseCore preprocessing: steps 1-7 of
:mod:`tpuemb_cfg.sparsecore.preprocessing` in compiled kernels, the same bytes as the NumPy
reference (``preprocess_stack``) at any thread count.

Import this module only through ``preprocessing._kernels``: it imports numba (``base.jit``),
which ``import tpuemb_cfg`` and ``tpuemb validate`` must never pay for.

Each local SparseCore ``c`` reads rows ``c b_f .. (c+1) b_f - 1`` of every feature ``f`` of the
stack and nothing else, and writes its own slice of every output, so the SparseCores of every
stack run in one pass of numba's thread count of threads (:func:`sort_merge_stacks`,
``base.jit.each_chunk``: serial ``nogil`` kernels over chunks of (stack, SparseCore), each
thread taking the next chunk when free) and the result does not depend on how many there are.
Ids are read as given when int32 (else int64), without a copy. Per SparseCore, without
minibatching in scratch arrays of its own that each thread reuses (they stay in cache and fault
no pages), with minibatching in its slice of flat arrays (the stack's ids laid out SparseCore
after SparseCore):

1. **Count** (one pass over the ids): per partition, and every digit of the sort below.
2. **Sort** (:func:`_sort_core`): a least-significant-digit radix sort of the keys
   ``partition | embedding id | sample | local position`` by (partition, embedding id), its
   first pass building the keys from the ids in input order: per row the gain denominator
   (sum, or sum of squares by ``fma32``, left to right in float32), per id its gain by local
   position (none for ``sum`` without weights: every gain is 1). The keys are distinct and
   their low bits ascend in input order, so the stable sort gives the order (partition,
   embedding id, input position) of the reference's stable sort. When the four do not fit 63
   bits the sample is kept beside the key, by local position; when partition, embedding id and
   position alone do not, the stack runs the NumPy code.
3. **Merge** each partition's sorted keys: neighbours with equal (embedding id, sample) merge
   (gains added in order, float32), counting entries and distinct ids (the statistics) and,
   with ``allow_id_dropping``, the kept prefix of each run (entry rank within ``max_ids`` and
   distinct rank within ``max_unique``: both ranks grow along the run, so what is kept is a
   prefix) and the raw ids dropped by the limits.

4. **Fill**: each run's written entries and padding into the CSR arrays (skipped with
   ``csr=False``) and every raw id's drop flag. Without minibatching the merge does it
   (:func:`_merge_direct_core`: a SparseCore's runs fill its own slots one after the other, so
   an entry's fate is known when it opens), and writes the drop flags in input order; with
   minibatching (a device's SparseCores share one sequence) :func:`_fill` does, after the
   room of each run is known.

Without minibatching the kernels also write each run's room and row pointers (the values of
``preprocess_stack._room`` and ``_layout``), count the buffer's drops and zero the slots of
their segment no run writes (the CSR arrays are allocated uninitialised when they are below
the memory-map size of ``preprocess_stack._zeros``), so the serial Python around them is the
limit check and a few reshapes per stack. With minibatching the limit check, the room and the
row pointers are computed on the ``[SparseCores, N]`` counts with NumPy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.base.jit import each_chunk, fma32, njit
from tpuemb_cfg.sparsecore.preprocess_input import (
    _INT32_MAX,
    BoolArray,
    F32Array,
    IntArray,
    _Feature,
    _Options,
)
from tpuemb_cfg.sparsecore.preprocess_stack import (
    _csr_zeros,
    _entries,
    _layout,
    _merge,
    _Merged,
    _no_csr,
    _per_feature,
    _result,
    _room,
    _shaped,
    _Sizes,
    _Stats,
    _zeros,
)
from tpuemb_cfg.sparsecore.results import PreprocessedStack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack

__all__ = ["Compiled", "sort_merge", "sort_merge_stacks"]

I32Array = npt.NDArray[np.int32]
_COMBINER = {"sum": 0, "mean": 1, "sqrtn": 2}
#: The bits of a sort key (the tests lower it, and clear ``_PACK_SAMPLES``, to run the layouts
#: a large batch takes: samples beside the keys, or the NumPy code).
_KEY_BITS = 63
_PACK_SAMPLES = True
#: CSR arrays of fewer bytes (each) are allocated uninitialised and the kernels zero the slots no
#: run writes (:func:`_csr_empty`): there the C library serves them from its heap, reused memory
#: ``np.zeros`` would clear with a serial ``memset``; larger ones it maps fresh, zero pages the
#: kernel clears only where a run writes (the tail of each segment then costs nothing, and
#: writing it would fault it in: 0.76-0.80x at 16,384 rows per device).
_EMPTY_BELOW = 1 << 20
# The columns of the per-feature table the kernels read.
_VALUES, _SPLITS, _PER_CORE, _SHIFT, _COLUMN, _SAMPLE, _WEIGHTS = range(7)


@njit(nogil=True, cache=True, error_model="numpy")
def _denominator(weights: Any, has_w: bool, w_at: int, a: int, b: int, combiner: int) -> Any:
    """The row's gain denominator: 1 (sum), its weight sum (mean) or the square root of its
    sum of squares by fused multiply-adds (sqrtn), in float32 left to right from 0; weight
    ``j + w_at`` is id ``j``'s, and without weights (``has_w`` false) each id weighs 1."""
    one = np.float32(1.0)
    total = np.float32(0.0)
    if combiner == 0:
        return one
    for j in range(a, b):
        w = weights[j + w_at] if has_w else one
        if combiner == 1:
            total += w
        else:
            total = fma32(w, w, total)
    if combiner == 2:
        return np.sqrt(total)
    return total


@njit(nogil=True, cache=True, error_model="numpy")
def _digits(size: int, key_bits: int) -> tuple[int, int]:
    """The (passes, width) of a least-significant-digit radix sort of ``size`` values by
    ``key_bits`` bits with the least work: each pass moves ``size`` values (reading and
    writing each: weight 6) and clears, scans and sums ``2^width`` counts (weight 4); at most
    2^11 counts a digit (they stay in the first-level cache)."""
    passes, best = 1, -1
    for p in range(1, key_bits + 1):
        w = (key_bits + p - 1) // p
        if w > 11:
            continue
        cost = p * (6 * size + 4 * (1 << w))
        if best < 0 or cost < best:
            passes, best = p, cost
    return passes, (key_bits + passes - 1) // passes


@njit(nogil=True, cache=True, error_model="numpy")
def _sort_core(c: int, values: Any, splits: Any, weights: Any, feat: Any, n: int,
               shift_n: int, combiner: int, unit: bool, bits: int, sample_bits: int,
               column_bits: int, start: int, key: Any, spare: Any, sample: Any, gain: Any,
               seg: Any) -> Any:
    """Steps 1-2 for SparseCore ``c``, whose slice starts at ``start``: its ids counted per
    partition (returned, and each partition's first slot in ``seg[c]``), per id its gain by
    local position, and the keys ``partition | embedding id | sample | local position``
    (``shift_n``, ``column_bits``, ``sample_bits`` and ``bits`` wide) sorted by partition and
    embedding id into ``key``: the order (partition, embedding id, position) of the
    reference's stable sort (samples ascend with positions). The sort is a least-significant-
    digit radix sort (:func:`_digits`) of the SparseCore's keys: one pass counts every digit
    (and the partitions), the first pass builds the keys from the ids in input order, each
    later pass moves them between ``spare`` and ``key`` (a digit all keys share is skipped),
    so the keys are written and read a few times in cache. With ``unit`` gains (``sum``
    without weights: every gain is 1) no gain is written; with ``sample_bits`` 0 (the four do
    not fit 63 bits) the samples go to ``sample`` by local position instead."""
    one = np.float32(1.0)
    below = bits + sample_bits
    size = 0
    for f in range(feat.shape[0]):
        s0, per_core = feat[f, _SPLITS], feat[f, _PER_CORE]
        size += splits[s0 + (c + 1) * per_core] - splits[s0 + c * per_core]
    passes, width = _digits(size, shift_n + column_bits)
    mask = (np.int64(1) << width) - 1
    counts = np.zeros((passes, np.int64(1) << width), np.int64)
    count = np.zeros(n, np.int64)
    for f in range(feat.shape[0]):
        v0, s0, per_core, shift = feat[f, _VALUES], feat[f, _SPLITS], feat[f, _PER_CORE], \
            feat[f, _SHIFT]
        column0 = feat[f, _COLUMN]
        for j in range(v0 + splits[s0 + c * per_core], v0 + splits[s0 + (c + 1) * per_core]):
            x = values[j]
            p = (x + shift) & (n - 1)
            v = (p << column_bits) | ((x >> shift_n) + column0)
            count[p] += 1
            for d in range(passes):
                counts[d, (v >> (d * width)) & mask] += 1
    total = start
    for p in range(n):
        seg[c, p] = total
        total += count[p]
    moves = 1  # the passes that move keys: the first always (it builds them)
    for d in range(passes):
        if d and counts[d].max() == size:
            counts[d, 0] = -1  # skipped
            continue
        moves += d > 0
        at = start
        for b in range(counts.shape[1]):
            at, counts[d, b] = at + counts[d, b], at
    into = key if moves % 2 == 1 else spare  # the last pass writes ``key``
    local = 0
    for f in range(feat.shape[0]):
        v0, s0, per_core, shift = feat[f, _VALUES], feat[f, _SPLITS], feat[f, _PER_CORE], \
            feat[f, _SHIFT]
        column0, sample0, w0 = feat[f, _COLUMN], feat[f, _SAMPLE], feat[f, _WEIGHTS]
        has_w, w_at = w0 >= 0, w0 - v0
        for r in range(per_core):
            a = v0 + splits[s0 + c * per_core + r]
            b = v0 + splits[s0 + c * per_core + r + 1]
            den = _denominator(weights, has_w, w_at, a, b, combiner)
            for j in range(a, b):
                x = values[j]
                w = weights[j + w_at] if has_w else one
                v = (((x + shift) & (n - 1)) << column_bits) | ((x >> shift_n) + column0)
                i = start + local
                if not unit:
                    gain[i] = w if combiner == 0 else w / den
                if sample_bits:
                    k = (((v << sample_bits) | (r + sample0)) << bits) | local
                else:
                    sample[i] = r + sample0
                    k = (v << bits) | local
                digit = v & mask
                into[counts[0, digit]] = k
                counts[0, digit] += 1
                local += 1
    in_key = moves % 2 == 1
    for d in range(1, passes):
        if counts[d, 0] < 0:
            continue
        src, dst = (key, spare) if in_key else (spare, key)
        for i in range(start, start + size):
            k = src[i]
            digit = (k >> (below + d * width)) & mask
            dst[counts[d, digit]] = k
            counts[d, digit] += 1
        in_key = not in_key
    return count


@njit(nogil=True, cache=True, error_model="numpy")
def _merge_core(c: int, values: Any, splits: Any, weights: Any, feat: Any,
                n: int, shift_n: int, combiner: int, unit: bool, bits: int, sample_bits: int,
                column_bits: int, core_start: Any, dropping: bool, max_ids: int,
                max_unique: int, key: Any, spare: Any, sample: Any, gain: Any, m_column: Any,
                m_sample: Any, m_gain: Any, m_count: Any, m_new: Any, seg: Any, m_start: Any,
                entries: Any, distinct: Any,
                kept: Any, limit_drops: Any) -> None:
    """Steps 1-3 for SparseCore ``c``: :func:`_sort_core`, then each partition's sorted keys
    merged, counted and (with ``dropping``) cut to the kept prefix."""
    mask = (np.int64(1) << bits) - 1
    column_mask = (np.int64(1) << column_bits) - 1
    one = np.float32(1.0)
    start = core_start[c]
    count = _sort_core(c, values, splits, weights, feat, n, shift_n, combiner, unit, bits,
                       sample_bits, column_bits, start, key, spare, sample, gain, seg)
    sample_mask = (np.int64(1) << sample_bits) - 1
    m = start
    drops = 0
    for p in range(n):
        m_start[c, p] = m
        first = m
        prev_column, prev_sample = np.int64(-1), np.int64(-1)
        unique = 0
        for i in range(seg[c, p], seg[c, p] + count[p]):
            k = key[i]
            column, local = (k >> (bits + sample_bits)) & column_mask, k & mask
            s = (k >> bits) & sample_mask if sample_bits else np.int64(sample[start + local])
            g = one if unit else gain[start + local]
            if column == prev_column and s == prev_sample:
                m_gain[m - 1] += g
                m_count[m - 1] += 1
                continue
            m_column[m] = column
            m_sample[m] = s
            m_gain[m] = g
            m_count[m] = 1
            m_new[m] = column != prev_column
            unique += column != prev_column
            prev_column, prev_sample = column, s
            m += 1
        entries[c, p] = m - first
        distinct[c, p] = unique
        kept[c, p] = m - first
        if dropping:
            rank, unique_rank, keep = 0, 0, 0
            for q in range(first, m):
                rank += 1
                unique_rank += m_new[q]
                if rank <= max_ids and unique_rank <= max_unique:
                    keep += 1
                else:
                    drops += m_count[q]
            kept[c, p] = keep
    limit_drops[c] = drops


@njit(nogil=True, cache=True, error_model="numpy")
def _merge_direct_core(c: int, values: Any, splits: Any, weights: Any, feat: Any, n: int,
                       shift_n: int, combiner: int, unit: bool, bits: int, sample_bits: int,
                       column_bits: int, core_start: Any, dropping: bool, max_ids: int,
                       max_unique: int, key: Any, spare: Any, sample: Any, gain: Any, seg: Any,
                       capacity: int, write_csr: bool, csr: Any, lost: Any, dropped: Any,
                       entries: Any, distinct: Any, kept: Any, limit_drops: Any,
                       zero_tail: bool, pointers: Any) -> None:
    """Steps 1-4 for SparseCore ``c`` without minibatching, in one pass after the sort: its
    runs are laid out one after the other in its own ``capacity`` slots, so whether an entry
    is written is known when it opens (it is kept while its rank and distinct rank are within
    the limits, a prefix; it fits while its rank is within the room its run starts with,
    ``capacity - sum of roundup8(kept)`` of the runs before, as ``preprocess_stack._room``
    computes it), and each entry goes to the CSR arrays ``csr`` when it closes, each raw id's
    drop flag to ``lost`` by local position. Its row pointers go to ``pointers[c]`` (each run's
    end, ``preprocess_stack._layout``), ``limit_drops[c]`` counts every id it drops (limits and
    buffer); with ``zero_tail`` (``csr`` allocated uninitialised) it also writes the zeros of
    its slots past its last run (and the masks' zeros of the slots it writes)."""
    mask = (np.int64(1) << bits) - 1
    one = np.float32(1.0)
    nan = np.float32(np.nan)
    pad = np.int32(_INT32_MAX)
    column_mask = (np.int64(1) << column_bits) - 1
    embedding_ids, sample_ids, gains, valid, padded = csr
    start = 0  # the scratch arrays hold this SparseCore's ids only
    count = _sort_core(c, values, splits, weights, feat, n, shift_n, combiner, unit, bits,
                       sample_bits, column_bits, start, key, spare, sample, gain, seg)
    sample_mask = (np.int64(1) << sample_bits) - 1
    first_slot = c * capacity
    begin = 0  # the run's first slot within the SparseCore's segment
    drops = 0
    any_lost = False
    for p in range(n):
        room = capacity - begin
        opened, unique, keep = 0, 0, 0
        prev_column, prev_sample = np.int64(-1), np.int64(-1)
        total = np.float32(0.0)
        kept_now = written_now = False
        for i in range(seg[c, p], seg[c, p] + count[p]):
            k = key[i]
            column, local = (k >> (bits + sample_bits)) & column_mask, k & mask
            s = (k >> bits) & sample_mask if sample_bits else np.int64(sample[start + local])
            g = one if unit else gain[start + local]
            # Few branches (equal neighbours come unpredictably): an entry's rank, distinct
            # rank and fate change only when it opens, and its slot is rewritten with the
            # running sum at every id it merges, the last time with the whole sum.
            other = column != prev_column
            opens = other | (s != prev_sample)
            opened += opens
            unique += other
            total = g if opens else total + g
            kept_now = not dropping or (opened <= max_ids and unique <= max_unique)
            keep += kept_now & opens
            written_now = kept_now and opened <= room
            prev_column, prev_sample = column, s
            if written_now and write_csr:
                at = first_slot + begin + opened - 1
                embedding_ids[at] = column
                sample_ids[at] = s
                gains[at] = total
                valid[at] = True
                padded[at] = False
            drops += not kept_now
            lost[local] = not written_now
            any_lost |= not written_now
        entries[c, p] = opened
        distinct[c, p] = unique
        kept[c, p] = keep
        written = min(keep, max(0, room))
        drops += keep - written  # the buffer's drops: an entry once
        pointers[c, p] = min(begin, capacity) + written
        if write_csr:
            end = first_slot + begin + written
            for i in range(end, (end + 7) // 8 * 8):
                embedding_ids[i] = pad
                sample_ids[i] = pad
                gains[i] = nan
                valid[i] = False
                padded[i] = True
        begin += (keep + 7) // 8 * 8
    for p in range(n, pointers.shape[1]):  # the slots past N repeat roundup8 of the last end
        pointers[c, p] = (pointers[c, n - 1] + 7) // 8 * 8
    if write_csr and zero_tail:  # one array at a time: each a plain fill (vectorised)
        tail, end = first_slot + min(begin, capacity), first_slot + capacity
        embedding_ids[tail:end] = 0
        sample_ids[tail:end] = 0
        gains[tail:end] = 0
        valid[tail:end] = False
        padded[tail:end] = False
    limit_drops[c] = drops
    if any_lost:  # else its flags stay the zeros they were allocated as
        _flags(c, c + 1, splits, feat, core_start - core_start[c], lost, dropped)


@njit(nogil=True, cache=True, error_model="numpy")
def _flags(lo: int, hi: int, splits: Any, feat: Any, core_start: Any, lost: Any,
           dropped: Any) -> None:
    """The drop flags of SparseCores ``lo .. hi - 1`` from local positions (``lost``) to the
    input order, feature by feature."""
    for c in range(lo, hi):
        local = core_start[c]
        for f in range(feat.shape[0]):
            v0, s0, per_core = feat[f, _VALUES], feat[f, _SPLITS], feat[f, _PER_CORE]
            for j in range(v0 + splits[s0 + c * per_core],
                           v0 + splits[s0 + (c + 1) * per_core]):
                dropped[j] = lost[local]
                local += 1


@njit(nogil=True, cache=True, error_model="numpy")
def _sort_merge(lo: int, hi: int, values: Any, splits: Any, weights: Any,
                feat: Any, n: int, shift_n: int, combiner: int, unit: bool, bits: int,
                sample_bits: int, column_bits: int, core_start: Any, dropping: bool, max_ids: int,
                max_unique: int, key: Any, spare: Any, sample: Any, gain: Any, m_column: Any,
                m_sample: Any, m_gain: Any, m_count: Any, m_new: Any, seg: Any, m_start: Any,
                entries: Any, distinct: Any, kept: Any, limit_drops: Any, direct: bool,
                capacity: int, write_csr: bool, csr: Any, lost: Any, zero_tail: bool,
                pointers: Any) -> None:
    """Steps 1-3 for the local SparseCores ``lo .. hi - 1`` (module docstring); the merged
    entries of SparseCore ``c`` from ``core_start[c]``, run after run; with ``direct`` (no
    minibatching) step 4 too, without the merged entries (:func:`_merge_direct_core`)."""
    if direct:  # scratch for one SparseCore at a time, reused (it stays in cache)
        most = 0
        for c in range(lo, hi):
            most = max(most, core_start[c + 1] - core_start[c])
        key_c, spare_c, lost_c = np.empty(most, np.int64), np.empty(most, np.int64), \
            np.empty(most, np.bool_)
        sample_c = np.empty(0 if sample_bits else most, np.int32)
        gain_c = np.empty(0 if unit else most, np.float32)
        for c in range(lo, hi):
            _merge_direct_core(c, values, splits, weights, feat, n, shift_n, combiner, unit,
                               bits, sample_bits, column_bits, core_start, dropping, max_ids,
                               max_unique, key_c, spare_c, sample_c, gain_c, seg, capacity,
                               write_csr, csr, lost_c, lost, entries, distinct, kept,
                               limit_drops, zero_tail, pointers)
        return
    for c in range(lo, hi):
        _merge_core(c, values, splits, weights, feat, n, shift_n, combiner, unit, bits,
                    sample_bits, column_bits, core_start, dropping, max_ids, max_unique, key,
                    spare, sample, gain, m_column, m_sample, m_gain, m_count, m_new, seg,
                    m_start, entries, distinct, kept, limit_drops)


@njit(nogil=True, cache=True, error_model="numpy")
def _fill_core(c: int, key: Any, bits: int, splits: Any, feat: Any,
               core_start: Any, seg: Any, m_start: Any, entries: Any, m_column: Any,
               m_sample: Any, m_gain: Any, m_count: Any, written: Any, base: Any,
               write_csr: bool, flags: bool, embedding_ids: Any, sample_ids: Any, gains: Any,
               valid: Any, padded: Any, lost: Any, dropped: Any) -> None:
    """Step 4 for SparseCore ``c`` (:func:`_fill`)."""
    mask = (np.int64(1) << bits) - 1
    nan = np.float32(np.nan)
    pad = np.int32(_INT32_MAX)
    start = core_start[c]
    for p in range(written.shape[1]):
        w = written[c, p]
        m = m_start[c, p]
        if write_csr:
            at = base[c, p]
            for i in range(w):
                embedding_ids[at + i] = m_column[m + i]
                sample_ids[at + i] = m_sample[m + i]
                gains[at + i] = m_gain[m + i]
                valid[at + i] = True
            for i in range(at + w, (at + w + 7) // 8 * 8):
                embedding_ids[i] = pad
                sample_ids[i] = pad
                gains[i] = nan
                padded[i] = True
        if not flags:
            continue
        i = seg[c, p]
        for q in range(entries[c, p]):
            flag = q >= w
            for _ in range(m_count[m + q]):
                lost[start + (key[i] & mask)] = flag
                i += 1
    if not flags:
        return
    local = start
    for f in range(feat.shape[0]):
        v0, s0, per_core = feat[f, _VALUES], feat[f, _SPLITS], feat[f, _PER_CORE]
        for j in range(v0 + splits[s0 + c * per_core], v0 + splits[s0 + (c + 1) * per_core]):
            dropped[j] = lost[local]
            local += 1


@njit(nogil=True, cache=True, error_model="numpy")
def _fill(lo: int, hi: int, key: Any, bits: int, splits: Any, feat: Any,
          core_start: Any, seg: Any, m_start: Any, entries: Any, m_column: Any, m_sample: Any,
          m_gain: Any, m_count: Any, written: Any, base: Any, write_csr: bool, flags: bool,
          embedding_ids: Any, sample_ids: Any, gains: Any, valid: Any, padded: Any, lost: Any,
          dropped: Any) -> None:
    """Step 4 for the local SparseCores ``lo .. hi - 1``: each run's first ``written`` entries
    at ``base`` and the padding after them up to a multiple of 8 (when ``write_csr``), and the
    drop flag of every raw id (its entry's rank in the run reaches ``written``) when ``flags``:
    first by local position (``lost``, the SparseCore's slice), then copied feature by feature
    to the input order. Without ``flags`` (nothing dropped) ``dropped`` is left alone."""
    for c in range(lo, hi):
        _fill_core(c, key, bits, splits, feat, core_start, seg, m_start, entries, m_column,
                   m_sample, m_gain, m_count, written, base, write_csr, flags, embedding_ids,
                   sample_ids, gains, valid, padded, lost, dropped)


@dataclass
class Compiled:
    """One stack after steps 1-3 in the compiled engine: the flat arrays of :func:`_sort_merge`
    and the ``[SparseCores, N]`` counts (``entries``, ``distinct``: the statistics)."""

    splits: IntArray
    feat: IntArray
    core_start: IntArray
    bits: int
    key: IntArray
    seg: IntArray
    m_start: IntArray
    m_column: I32Array
    m_sample: I32Array
    m_gain: F32Array
    m_count: I32Array
    m_new: BoolArray
    entries: IntArray
    distinct: IntArray
    kept: IntArray
    limit_drops: IntArray
    #: without minibatching: the CSR arrays already written (flat; empty without ``csr``) and
    #: each raw id's drop flag in input order (:func:`_merge_direct_core`); else None
    direct: tuple[tuple[npt.NDArray[Any], ...], BoolArray] | None = None
    #: without minibatching: the row pointers ``[SparseCores, max(N, 8)]`` the kernels wrote
    #: (and ``limit_drops`` counts the buffer's drops too)
    pointers: I32Array | None = None

    def finish(self, stack: Stack, slots: Sequence[FeatureSlot],
               inputs: Mapping[str, _Feature], opts: _Options, sizes: _Sizes, stats: _Stats,
               csr: bool) -> PreprocessedStack:
        """Steps 6-7 (drops, the CSR arrays, the drop flags): ``preprocess_stack._finish``."""
        if self.direct is not None:  # the kernels wrote everything (:func:`_merge_direct_core`)
            arrays, dropped = self.direct
            pointers: Any = self.pointers  # int32 already (astype copies it: small)
            out = _shaped(pointers, *arrays, opts=opts) if csr else _no_csr(opts)
            return _result(stack, sizes, stats, int(self.limit_drops.sum()), out,
                           _per_feature(dropped, slots, inputs))
        if opts.allow_id_dropping:
            kept, drops = self.kept, int(self.limit_drops.sum())
        else:
            kept, drops = self.entries, 0
        written = _room(kept, sizes.coo_size // opts.sparse_cores, opts)
        drops += int(kept.sum() - written.sum())
        pointers, base = _layout(written, sizes.coo_size, opts)
        arrays = _csr_zeros(opts.local_devices * sizes.coo_size if csr else 0)
        ids = self.key.shape[0]
        dropped = np.empty(ids, bool) if drops else np.zeros(ids, bool)
        args: tuple[Any, ...] = (
            self.key, self.bits, self.splits, self.feat, self.core_start, self.seg,
            self.m_start, self.entries, self.m_column, self.m_sample, self.m_gain, self.m_count,
            written, np.ascontiguousarray(base, np.int64), csr, drops > 0, *arrays,
            np.empty(ids if drops else 0, bool), dropped)
        each_chunk(self.entries.shape[0], lambda lo, hi: _fill(lo, hi, *args))
        out = _shaped(pointers, *arrays, opts=opts) if csr else _no_csr(opts)
        return _result(stack, sizes, stats, drops, out, _per_feature(dropped, slots, inputs))

    def merged(self) -> _Merged:
        """The same entries as the NumPy engine's :class:`_Merged` (for the minibatch split)."""
        cores, n = self.entries.shape
        mask = (1 << self.bits) - 1
        order = np.empty(self.key.shape[0], np.int64)
        pick = []
        for c in range(cores):
            lo, hi = int(self.core_start[c]), int(self.core_start[c + 1])
            raw = [np.arange(v0 + self.splits[s0 + c * per_core],
                             v0 + self.splits[s0 + (c + 1) * per_core], dtype=np.int64)
                   for v0, s0, per_core in self.feat[:, [_VALUES, _SPLITS, _PER_CORE]]]
            raw_of_local = np.concatenate(raw) if raw else np.zeros(0, np.int64)
            order[lo:hi] = raw_of_local[self.key[lo:hi] & mask]
            pick.append(np.arange(lo, lo + int(self.entries[c].sum()), dtype=np.int64))
        which = np.concatenate(pick) if pick else np.zeros(0, np.int64)
        count = self.m_count[which].astype(np.int64)
        return _Merged(order, np.repeat(np.arange(which.shape[0], dtype=np.int64), count), count,
                       np.repeat(np.arange(cores * n, dtype=np.int64), self.entries.reshape(-1)),
                       self.m_column[which].astype(np.int64),
                       self.m_sample[which].astype(np.int64), self.m_gain[which],
                       self.m_new[which])


def sort_merge(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
               opts: _Options, sizes: _Sizes, csr: bool = True) -> Compiled | _Merged:
    """Steps 1-3 of one stack (:func:`sort_merge_stacks`)."""
    return sort_merge_stacks([(stack, slots, sizes)], inputs, opts, csr)[0]


def sort_merge_stacks(items: Sequence[tuple[Stack, Sequence[FeatureSlot], _Sizes]],
                      inputs: Mapping[str, _Feature], opts: _Options,
                      csr: bool = True) -> list[Compiled | _Merged]:
    """Steps 1-3 of each ``(stack, its features, its sizes)``, the SparseCores of every stack
    in one pass of the threads (``each_chunk``; one wait, however many stacks)."""
    outs, jobs = [], []
    for stack, slots, sizes in items:
        out, args = _prepare(stack, slots, inputs, opts, sizes, csr)
        outs.append(out)
        if args is not None:
            jobs.append(args)
    cores = opts.local_sparse_cores

    def work(lo: int, hi: int) -> None:
        for job in range(lo // cores, (hi - 1) // cores + 1):
            first = job * cores
            _sort_merge(max(lo, first) - first, min(hi, first + cores) - first, *jobs[job])

    each_chunk(len(jobs) * cores, work)
    return outs


def _prepare(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
             opts: _Options, sizes: _Sizes,
             csr: bool) -> tuple[Compiled | _Merged, tuple[Any, ...] | None]:
    """One stack's record and the arguments of :func:`_sort_merge` for it (None: done
    already). Steps 1-3 (the limits of ``sizes`` for the kept prefixes), and without
    minibatching step 4 as well (the CSR arrays only with ``csr``). A stack whose
    keys (partition, embedding id, local position) would not fit 63 bits (never for int32 ids,
    fewer than 2^20 SparseCores and 2^12 ids per SparseCore and partition... in practice: a
    vocabulary and a per-SparseCore batch whose bits add up past 63) runs the NumPy code."""
    n, cores = opts.num_sparse_cores, opts.local_sparse_cores
    features = [inputs[slot.name] for slot in slots]
    vocab = {t.name: t.vocabulary_size for t in stack.tables}
    feat = np.zeros((len(slots), 7), np.int64)
    per_core_ids = np.zeros(cores, np.int64)
    values_at = splits_at = weights_at = samples_at = 0
    top_column = 0
    for f, (slot, feature) in enumerate(zip(slots, features, strict=True)):
        per_core = feature.rows // cores
        feat[f] = (values_at, splits_at, per_core, slot.col_shift, slot.col_offset // n,
                   samples_at, weights_at if feature.weights is not None else -1)
        samples_at += per_core
        if per_core:
            per_core_ids += np.diff(feature.row_splits[::per_core])
        top_column = max(top_column, (vocab[slot.table] - 1) // n + slot.col_offset // n)
        values_at += feature.values.shape[0]
        splits_at += feature.row_splits.shape[0]
        weights_at += 0 if feature.weights is None else feature.weights.shape[0]
    core_start = np.zeros(cores + 1, np.int64)
    np.cumsum(per_core_ids, out=core_start[1:])
    bits = max(1, int(per_core_ids.max(initial=1) - 1).bit_length())
    column_bits = max(1, top_column.bit_length())
    shift_n = n.bit_length() - 1
    if bits + shift_n + column_bits > _KEY_BITS:  # the NumPy code, on int64 ids
        wide = {slot.name: replace(inputs[slot.name],
                                   values=inputs[slot.name].values.astype(np.int64))
                for slot in slots}
        return _merge(_entries(stack, slots, wide, opts), n), None
    sample_bits = max(1, samples_at - 1).bit_length()  # samples in the key when they fit
    if bits + sample_bits + shift_n + column_bits > _KEY_BITS or not _PACK_SAMPLES:
        sample_bits = 0
    narrow = all(f.values.dtype == np.int32 for f in features)  # compiled for int32 and int64
    values = _joined([f.values for f in features], np.int32 if narrow else np.int64)
    splits = _joined([f.row_splits for f in features], np.int64)
    weights = _joined([f.weights for f in features if f.weights is not None], np.float32)
    total = values.shape[0]
    direct = not opts.minibatching
    merged = 0 if direct else total  # the merged entries' arrays, for _fill or merged()
    out = Compiled(splits, feat, core_start, bits, np.empty(merged, np.int64),
                   np.zeros((cores, n), np.int64), np.zeros((cores, n), np.int64),
                   np.empty(merged, np.int32), np.empty(merged, np.int32),
                   np.empty(merged, np.float32), np.empty(merged, np.int32),
                   np.empty(merged, bool), np.zeros((cores, n), np.int64),
                   np.zeros((cores, n), np.int64), np.zeros((cores, n), np.int64),
                   np.zeros(cores, np.int64))
    zero_tail = False
    if direct:  # the drop flags zero but where the kernels drop (their pages faulted only there)
        size = opts.local_devices * sizes.coo_size if csr else 0
        zero_tail = size * 4 < _EMPTY_BELOW  # else zero pages (_csr_zeros), faulted if written
        out.direct = (_csr_empty(size) if zero_tail else _csr_zeros(size),
                      _zeros(total, np.bool_))
        out.pointers = np.empty((cores, max(n, 8)), np.int32)
    arrays, lost = out.direct if out.direct is not None else (_csr_zeros(0), np.empty(0, bool))
    combiner = _COMBINER[stack.combiner]
    unit = combiner == 0 and weights.shape[0] == 0
    scratch = 0 if direct else total  # without minibatching each chunk has its own
    args = (values, splits, weights, feat, n, shift_n, combiner, unit, bits, sample_bits,
            column_bits, core_start, opts.allow_id_dropping, sizes.max_ids, sizes.max_unique,
            out.key, np.empty(scratch, np.int64),
            np.empty(0 if sample_bits else scratch, np.int32),
            np.empty(0 if unit else scratch, np.float32), out.m_column, out.m_sample, out.m_gain,
            out.m_count, out.m_new, out.seg, out.m_start, out.entries, out.distinct, out.kept,
            out.limit_drops, direct, sizes.coo_size // opts.sparse_cores, csr, arrays, lost,
            zero_tail, out.pointers if direct else np.empty((0, 8), np.int32))
    return out, args


def _csr_empty(total: int) -> tuple[npt.NDArray[Any], ...]:
    """``preprocess_stack._csr_zeros`` uninitialised: each SparseCore's kernel writes its own
    segment whole (:func:`_merge_direct_core` with ``zero_tail``), in parallel and once, where a
    ``memset`` of every stack's buffer would run first, alone."""
    return (np.empty(total, np.int32), np.empty(total, np.int32), np.empty(total, np.float32),
            np.empty(total, np.bool_), np.empty(total, np.bool_))


def _joined(arrays: list[Any], dtype: type) -> npt.NDArray[Any]:
    """The arrays end to end (the one array itself when alone, without a copy)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0], dtype)
    if not arrays:
        return np.zeros(0, dtype)
    return np.concatenate(arrays).astype(dtype, copy=False)

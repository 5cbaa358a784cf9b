"""jax-tpu-embedding's minibatching (step 8 of :mod:`tpuemb_cfg.sparsecore.preprocessing`): a batch
above its limits split into minibatches by HighwayHash buckets of embedding ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.sparsecore.preprocess_input import (
    MINIBATCHES,
    BoolArray,
    IntArray,
    SparseCoreLimitError,
    _Feature,
    _Options,
    _round8,
)
from tpuemb_cfg.sparsecore.preprocess_stack import (
    _Csr,
    _fill,
    _Merged,
    _no_csr,
    _padding,
    _per_feature,
    _result,
    _Sizes,
    _Stats,
)
from tpuemb_cfg.sparsecore.results import PreprocessedBatch, PreprocessedStack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, Stacking

# ---------------------------------------------------------------- minibatches
#
# With minibatching, a batch above its limits is split by buckets of embedding ids: bucket
# ``HighwayHash64(col_id) mod 64`` with ``col_id = embedding_id x N + partition`` (the 4 bytes
# of the int32, jax-tpu-embedding's fixed key). The 64 buckets are the leaves of a binary tree;
# a node is split when the counts of its two halves add up to more than the limit (a split
# node passes up the larger half, an unsplit one the sum), for every (SparseCore, partition)
# row, ids against max_ids and distinct ids against max_unique, and OR-ed over SparseCores,
# partitions and stacks. Each split node cuts the buckets between its halves: the minibatches
# are the runs of buckets between cuts, one more than the split nodes.

#: HighwayHash's key in jax-tpu-embedding (coo_format.h: "forever-unchanging").
_HH_KEY = (0x4451E30F87DB9609, 0xCA7358A1FD2737F8, 0x4B2C991FCEE4FDEA, 0x0B2658E18326F6BA)
_HH_MUL0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_HH_MUL1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_LOW32 = 0xFFFFFFFF

U64Array = npt.NDArray[np.uint64]


def _swap_halves(x: Any) -> Any:
    return (x >> 32) | (x << 32)


def _zipper(v1: U64Array, v0: U64Array) -> tuple[Any, Any]:
    """HighwayHash's byte shuffle of (v1, v0): the terms added to (add1, add0)."""
    add0 = ((((v0 & 0xFF000000) | (v1 & 0xFF00000000)) >> 24) |
            (((v0 & 0xFF0000000000) | (v1 & 0xFF000000000000)) >> 16) |
            (v0 & 0xFF0000) | ((v0 & 0xFF00) << 32) |
            ((v1 & 0xFF00000000000000) >> 8) | (v0 << 56))
    add1 = ((((v1 & 0xFF000000) | (v0 & 0xFF00000000)) >> 24) |
            (v1 & 0xFF0000) | ((v1 & 0xFF0000000000) >> 16) |
            ((v1 & 0xFF00) << 24) | ((v0 & 0xFF000000000000) >> 8) |
            ((v1 & 0xFF) << 48) | (v0 & 0xFF00000000000000))
    return add1, add0


def _hh_update(lanes: list[U64Array], s: list[list[U64Array]]) -> None:
    """One HighwayHash round on the state ``s = [v0, v1, mul0, mul1]`` (4 lanes each)."""
    v0, v1, mul0, mul1 = s
    for i in range(4):
        v1[i] = v1[i] + mul0[i] + lanes[i]
        mul0[i] = mul0[i] ^ ((v1[i] & _LOW32) * (v0[i] >> 32))
        v0[i] = v0[i] + mul1[i]
        mul1[i] = mul1[i] ^ ((v0[i] & _LOW32) * (v1[i] >> 32))
    for a, b, src, dst in ((1, 0, v1, v0), (3, 2, v1, v0), (1, 0, v0, v1), (3, 2, v0, v1)):
        add1, add0 = _zipper(src[a], src[b])
        dst[a] = dst[a] + add1
        dst[b] = dst[b] + add0


def highway_hash_int32(values: npt.ArrayLike,
                       key: tuple[int, int, int, int] = _HH_KEY) -> U64Array:
    """HighwayHash-64 of each value's 4 little-endian bytes (an int32, as jax-tpu-embedding
    hashes a ``col_id``), vectorised over ``values``; ``key`` defaults to its key.

    A 4-byte message is one padded packet: the state is initialised from the key, the length
    (4) is added to both halves of each v0 lane and both halves of each v1 lane are rotated
    left by 4, the packet ``[bytes, 0, 0, 0]`` is absorbed, four permute-and-update rounds
    follow, and the hash is ``v0[0] + v1[0] + mul0[0] + mul1[0]`` (mod 2^64).
    """
    x = np.asarray(values, np.int64).astype(np.uint32).astype(np.uint64)
    mask = (1 << 64) - 1

    def full(c: int) -> U64Array:
        return np.full(x.shape, c & mask, np.uint64)

    def rot4(c: int) -> int:
        lo, hi = c & _LOW32, c >> 32
        lo, hi = ((lo << 4) | (lo >> 28)) & _LOW32, ((hi << 4) | (hi >> 28)) & _LOW32
        return lo | hi << 32

    v0 = [full((_HH_MUL0[i] ^ key[i]) + (4 << 32) + 4) for i in range(4)]
    v1 = [full(rot4(_HH_MUL1[i] ^ (_swap_halves(key[i]) & mask))) for i in range(4)]
    state = [v0, v1, [full(c) for c in _HH_MUL0], [full(c) for c in _HH_MUL1]]
    zero = full(0)
    with np.errstate(over="ignore"):
        _hh_update([x, zero, zero, zero], state)
        for _ in range(4):
            v = state[0]
            _hh_update([_swap_halves(v[2]), _swap_halves(v[3]),
                        _swap_halves(v[0]), _swap_halves(v[1])], state)
        out: U64Array = state[0][0] + state[1][0] + state[2][0] + state[3][0]
    return out


def _split_nodes(counts: IntArray, limit: int) -> BoolArray:
    """The split nodes of the 64-bucket tree for every row of ``counts`` ``[rows, 64]``,
    OR-ed over the rows: node ``k`` in jax-tpu-embedding's order (level by level from the
    leaves, left to right: nodes 0-31 join bucket pairs, 32-47 pairs of pairs, ..., 62 the
    root)."""
    v = counts.copy()
    nodes: list[BoolArray] = []
    size = 2
    while size <= MINIBATCHES:
        left, right = v[:, 0::size], v[:, size // 2::size]
        over = left + right > limit
        v[:, 0::size] = np.where(over, np.maximum(left, right), left + right)
        nodes.append(np.asarray(over.any(axis=0), bool))
        size *= 2
    return np.concatenate(nodes)


def _minibatch_of_bucket(split: BoolArray) -> IntArray:
    """The minibatch of each bucket: a split node cuts between its two halves (buckets
    ``i + size/2 - 1`` and ``i + size/2``); the buckets between cuts merge, in bucket order."""
    cut = np.zeros(MINIBATCHES, np.int64)
    k, size = 0, 2
    while size <= MINIBATCHES:
        for i in range(0, MINIBATCHES, size):
            cut[i + size // 2] += int(split[k])
            k += 1
        size *= 2
    out: IntArray = np.cumsum(cut)
    return out


@dataclass(frozen=True)
class _Bucketed:
    """A stack's merged entries in jax-tpu-embedding's second-pass order, (SparseCore,
    partition, bucket, embedding id, input position): ``order`` indexes the merged entries,
    ``group`` is each one's (SparseCore, partition, bucket) ``run x 64 + bucket``."""

    order: IntArray
    bucket: IntArray
    group: IntArray
    entries: IntArray  # [cores x N, 64] merged entries per bucket
    distinct: IntArray  # [cores x N, 64] distinct embedding ids per bucket


def _bucketed(m: _Merged, opts: _Options) -> _Bucketed:
    n, rows = opts.num_sparse_cores, opts.local_sparse_cores * opts.num_sparse_cores
    col_id = m.column * n + m.run % n
    unique, inverse = np.unique(col_id, return_inverse=True)
    bucket = (highway_hash_int32(unique) & np.uint64(MINIBATCHES - 1)).astype(np.int64)[inverse]
    order = np.lexsort((bucket, m.run))  # stable: keeps (embedding id, position) order
    group = m.run[order] * MINIBATCHES + bucket[order]
    size = rows * MINIBATCHES
    entries = np.bincount(group, minlength=size).reshape(rows, MINIBATCHES)
    distinct = np.bincount(group[m.new_column[order]], minlength=size)
    return _Bucketed(order, bucket, group, entries, distinct.reshape(rows, MINIBATCHES))


def _check_bucket_limits(stack: Stack, b: _Bucketed, size: _Sizes, opts: _Options) -> None:
    """Without ``allow_id_dropping``: one bucket alone above a limit cannot be helped by any
    split, and jax-tpu-embedding aborts (ids checked first, as it does)."""
    n = opts.num_sparse_cores
    for counts, limit, name in ((b.entries, size.max_ids, "max_ids_per_partition"),
                                (b.distinct, size.max_unique, "max_unique_ids_per_partition")):
        observed = int(counts.max(initial=0))
        if observed <= limit:
            continue
        row = int(np.argmax(counts.max(axis=1)))
        device, sc = divmod(row // n, opts.sparse_cores)
        tables = tuple(t.name for t in stack.tables)
        what = "ids" if name == "max_ids_per_partition" else "distinct ids"
        raise SparseCoreLimitError(
            f"stacked table {stack.name!r} (tables {', '.join(tables)}): with "
            f"enable_minibatching=True, SparseCore {sc} of local device {device} sends "
            f"{observed} {what} of one minibatching bucket (embedding ids hashed into 64 "
            f"buckets) to partition {row % n}, more than {name} = {limit}; no split into "
            "minibatches can help; set allow_id_dropping=True to drop the excess ids, or raise "
            f"{name} of {stack.name!r} to at least {observed} (jax-tpu-embedding aborts the "
            "process here)",
            stack=stack.name, tables=tables, limit_name=name, observed=observed, limit=limit,
            where=(device, sc, row % n),
            per_sparse_core=counts.reshape(opts.local_sparse_cores, -1).max(axis=1).reshape(
                opts.local_devices, opts.sparse_cores))


def _preprocess_split(stacking: Stacking, inputs: Mapping[str, _Feature], opts: _Options,
                      sizes: Mapping[str, _Sizes], counted: Mapping[str, tuple[Any, _Stats]],
                      csr: bool = True) -> PreprocessedBatch:
    """jax-tpu-embedding's second pass: every stack's entries bucketed, a bucket above a
    limit aborts (without ``allow_id_dropping``), the split chosen over all stacks, then each
    stack dropped per bucket and laid out by minibatches. The statistics stay the first
    pass's (the whole batch, as without minibatching). The compiled engine's first pass is
    turned into :class:`_Merged` (its ``merged()``) and this NumPy pass runs on it; without
    ``csr`` the CSR arrays are left empty (:func:`_no_csr`)."""
    counted = {name: (m if isinstance(m, _Merged) else m.merged(), stats)
               for name, (m, stats) in counted.items()}
    split = np.zeros(MINIBATCHES - 1, bool)
    bucketed: dict[str, _Bucketed] = {}
    for stack in stacking.stacks:
        b = bucketed[stack.name] = _bucketed(counted[stack.name][0], opts)
        size = sizes[stack.name]
        if not opts.allow_id_dropping:
            _check_bucket_limits(stack, b, size, opts)
        split |= _split_nodes(b.entries, size.max_ids)
        split |= _split_nodes(b.distinct, size.max_unique)
    minibatch = _minibatch_of_bucket(split)
    stacks = {stack.name: _finish_split(stack, stacking.features_of(stack.name), inputs, opts,
                                        sizes[stack.name], counted[stack.name],
                                        bucketed[stack.name], minibatch, csr)
              for stack in stacking.stacks}
    return PreprocessedBatch(stacks=stacks, num_minibatches=int(minibatch[-1]) + 1)


def _rank_in_groups(flags: BoolArray, group: IntArray) -> IntArray:
    """1-based rank of each entry among the flagged entries of its group (groups contiguous),
    counting the entry itself when flagged."""
    running = np.cumsum(flags, dtype=np.int64)
    first = np.ones(group.shape[0], bool)
    first[1:] = group[1:] != group[:-1]
    starts = np.flatnonzero(first)
    before = (running - flags)[starts]
    rank: IntArray = running - np.repeat(before, np.diff(np.append(starts, group.shape[0])))
    return rank


def _finish_split(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],  # noqa: PLR0913
                  opts: _Options, size: _Sizes, counted: tuple[_Merged, _Stats], b: _Bucketed,
                  minibatch: IntArray, csr: bool = True) -> PreprocessedStack:
    m, stats = counted
    limit_drops = 0
    sel = b.order
    if opts.allow_id_dropping:  # the limits apply per (SparseCore, partition, bucket)
        rank = _rank_in_groups(np.ones(sel.shape[0], bool), b.group)
        unique_rank = _rank_in_groups(m.new_column[sel], b.group)
        keep = (rank <= size.max_ids) & (unique_rank <= size.max_unique)
        limit_drops = int(m.count[sel[~keep]].sum())
        sel = sel[keep]
    arrays, written = _csr_split(m, _Minibatched(sel, minibatch[b.bucket[sel]],
                                                 int(minibatch[-1]) + 1), size.coo_size, opts)
    kept = np.zeros(m.run.shape[0], bool)
    kept[written] = True
    dropped_raw = np.empty(m.order.shape[0], bool)
    dropped_raw[m.order] = ~kept[m.group]
    buffer_drops = sel.shape[0] - written.shape[0]
    return _result(stack, size, stats, limit_drops + buffer_drops,
                   arrays if csr else _no_csr(opts), _per_feature(dropped_raw, slots, inputs))


@dataclass(frozen=True)
class _Minibatched:
    """The merged entries kept by the limits (indices into :class:`_Merged`), in (SparseCore,
    partition, bucket, embedding id, position) order, and the minibatch of each, of ``count``."""

    entries: IntArray
    minibatch: IntArray
    count: int


def _csr_split(m: _Merged, kept: _Minibatched, coo_size: int,
               opts: _Options) -> tuple[_Csr, IntArray]:
    """The layout of K >= 2 minibatches (a needed split always cuts: a row above a limit
    splits some node). Per device the segments (SparseCore s, minibatch k) follow one
    another in that order, each partition of a segment starting at a multiple of 8. Within a
    partition the entries go by bucket, then embedding id (jax-tpu-embedding merges the
    buckets of a minibatch by a stable merge on the partition). Row-pointer block
    ``s x K + k`` (``max(N, 8)`` slots) holds each partition's absolute end and, in the spare
    slots, the segment's 8-aligned end. An entry whose position reaches the end of the
    device's buffer is dropped (counted once), and every later pointer is that end.

    Returns the arrays and the merged entries written, in buffer order."""
    n, s_count, devices = opts.num_sparse_cores, opts.sparse_cores, opts.local_devices
    sel, batch, k_count = kept.entries, kept.minibatch, kept.count
    core, partition = m.run[sel] // n, m.run[sel] % n
    layout = np.lexsort((partition, batch, core))  # stable: bucket, embedding id stay ordered
    sel = sel[layout]
    segment = ((core * k_count + batch) * n + partition)[layout]
    count = np.bincount(segment, minlength=devices * s_count * k_count * n).reshape(
        devices, s_count, k_count, n)
    padded = _round8(count).reshape(devices, -1)
    starts = (np.cumsum(padded, axis=1) - padded).reshape(count.shape)
    ends = starts + count
    width = max(n, 8)
    pointers = np.zeros((devices, s_count, k_count, width), np.int64)
    pointers[..., :n] = np.minimum(ends, coo_size)
    pointers[..., n:] = np.minimum(_round8(ends[..., -1:]), coo_size)
    row_pointers = np.zeros((devices, s_count * MINIBATCHES * width), np.int64)
    row_pointers[:, :s_count * k_count * width] = pointers.reshape(devices, -1)
    where = (starts.reshape(-1) - np.cumsum(count.reshape(-1)) + count.reshape(-1))[segment]
    where += np.arange(segment.shape[0], dtype=np.int64)
    fits = where < coo_size
    written = sel[fits]
    flat = where[fits] + segment[fits] // (s_count * k_count * n) * coo_size
    # Each (segment, partition) run ends at min(end, buffer end), then pads to a multiple of 8.
    run_ends = np.minimum(ends, coo_size).reshape(devices, -1)
    run_ends += np.arange(devices, dtype=np.int64)[:, None] * coo_size
    csr = _fill(row_pointers, (flat, m.column[written], m.sample[written], m.gain[written]),
                _padding(run_ends.reshape(-1)), devices * coo_size, opts)
    return csr, written

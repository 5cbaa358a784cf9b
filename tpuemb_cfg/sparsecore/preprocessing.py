"""Host preprocessing of one batch for the SparseCores, exactly as jax-tpu-embedding 0.2.0 does it.

``preprocess`` turns each feature's ids (and weights) into, per stacked table, the CSR arrays the
SparseCores read and the statistics ``embedding.preprocess_sparse_dense_matmul_input`` returns,
bit for bit where the reference writes them (docs/sparsecore/preprocessing.md states every rule;
the 200 stored batches of ``tests/data/sparsecore`` check them). Per stacked table, with ``N``
SparseCores in the slice, ``L`` local devices and ``S`` SparseCores per device:

1. **Samples.** Each feature's batch of ``B`` rows is cut into ``L x S`` contiguous slices of
   ``b = B / (L S)`` rows; slice ``c = d S + s`` goes to SparseCore ``s`` of local device ``d``.
   The stack's features, in ``row_offset`` order, are laid end to end there: row ``j`` of a
   slice of feature ``f`` is sample ``j + sum(b_f' for f' before f)``.
2. **Ids.** Id ``x`` of table ``t`` goes to partition ``p = (x + col_shift) mod N`` as embedding
   id ``x div N + row_offset_in_shard`` (``col_offset / N``).
3. **Gains.** ``w / D`` with ``D`` = 1 (sum), the row's weight sum (mean) or the square root of its
   sum of squares (sqrtn), in float32, summed left to right over the whole row (the squares by
   fused multiply-adds) before anything is merged or dropped (a zero ``D`` gives inf/NaN gains,
   as in jax-tpu-embedding).
4. **Sort and merge.** Per SparseCore, entries are ordered by (partition, embedding id, input
   position); entries with equal (partition, embedding id, sample) merge into one, gains summed
   left to right in float32.
5. **Statistics** (after merging, before dropping): per partition the most entries and the most
   distinct embedding ids any of a device's SparseCores sends there, and per SparseCore the sum
   over partitions of its entry counts rounded up to 8.
6. **Limits.** Walking a (SparseCore, partition) run in order, entry ``i`` (1-based) whose
   embedding id is the ``u``-th distinct one is dropped when ``i > max_ids`` or
   ``u > max_unique_ids``. Without ``allow_id_dropping`` jax-tpu-embedding aborts the process
   instead; tpuemb raises :class:`SparseCoreLimitError`.
7. **Buffer.** Each SparseCore owns ``coo_buffer_size_per_device / S`` entries; its partitions
   are written in order, each starting at a multiple of 8, and what does not fit is dropped,
   silently and whatever ``allow_id_dropping`` says (jax-tpu-embedding does the same). With
   minibatching (one minibatch), a device's SparseCores write one after the other instead.

Everything is vectorised NumPy: one sort of packed int64 keys per stacked table, the rest
``bincount`` and cumulative sums; the only Python loops run over positions within a row or a
merged entry (the float32 left-to-right sums) and over stacks and features.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.errors import TpuembError
from tpuemb_cfg.sparsecore.results import PreprocessedBatch, PreprocessedStack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, Stacking

__all__ = [
    "COMBINERS", "SparseCoreBufferError", "SparseCoreInputError", "SparseCoreLimitError",
    "SparseCoreUnsupportedError", "buffer_sizes", "preprocess",
]

#: The combiners whose gains jax-tpu-embedding computes (it treats any other name as "sum").
COMBINERS = ("sum", "mean", "sqrtn")

#: With minibatching, buffers and row pointers have room for this many minibatches.
MINIBATCHES = 64

#: The largest id jax-tpu-embedding keeps intact (it casts ids to int32).
_INT32_MAX = (1 << 31) - 1

Ids = Any  # a dense int array [batch, k] or a (values, row_splits) pair
IntArray = npt.NDArray[np.int64]
F32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


class SparseCoreInputError(TpuembError, ValueError):
    """A batch, a stacking or an option preprocessing cannot use, with what was found, what was
    expected and the fix. ``reason`` is a short tag tools can test (``"batch"``, ``"ids"``,
    ``"weights"``, ``"features"``, ``"topology"``, ``"combiner"``, ``"limits"``, ``"limit"``,
    ``"buffer"``); ``stack`` names the stacked table concerned (None when none is)."""

    def __init__(self, message: str, *, reason: str, stack: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.stack = stack


class SparseCoreLimitError(SparseCoreInputError):
    """A SparseCore sends more ids (or more distinct ids) to one partition than the stacked
    table's limit allows and ``allow_id_dropping`` is off; jax-tpu-embedding aborts the process
    there (``sort_and_group_coo_tensors_impl.h:61`` and ``:79``).

    ``limit_name`` is ``"max_ids_per_partition"`` or ``"max_unique_ids_per_partition"``,
    ``observed`` the largest count anywhere in the batch for that limit, ``limit`` the limit,
    ``device``/``sparse_core``/``partition`` the first place that count occurs, ``tables`` the
    stack's tables, ``per_sparse_core`` (``[local_devices, sparse_cores_per_device]``) each
    SparseCore's largest count over the partitions: the number jax-tpu-embedding's abort
    message reports for the SparseCore whose thread fails first.
    """

    def __init__(self, message: str, *, stack: str, tables: tuple[str, ...], limit_name: str,
                 observed: int, limit: int, where: tuple[int, int, int],
                 per_sparse_core: npt.NDArray[np.int64]) -> None:
        super().__init__(message, reason="limit", stack=stack)
        self.tables = tables
        self.limit_name = limit_name
        self.observed = observed
        self.limit = limit
        self.device, self.sparse_core, self.partition = where
        self.per_sparse_core = per_sparse_core


class SparseCoreBufferError(SparseCoreInputError):
    """A COO buffer size jax-tpu-embedding refuses by aborting: a suggested size above the
    theoretical maximum (``input_preprocessing_util.cc:240``), or a size of 0 or beyond int32
    (``:314``). ``size`` is the offending size, ``theoretical_max`` the bound."""

    def __init__(self, message: str, *, stack: str, size: int, theoretical_max: int) -> None:
        super().__init__(message, reason="buffer", stack=stack)
        self.size = size
        self.theoretical_max = theoretical_max


class SparseCoreUnsupportedError(TpuembError, NotImplementedError):
    """A case tpuemb does not reproduce: a batch jax-tpu-embedding would split into several
    minibatches, minibatching across hosts."""


@dataclass(frozen=True)
class _Options:
    """The keyword options of :func:`preprocess`, resolved against the stacking."""

    local_devices: int
    global_devices: int
    sparse_cores: int  # per device
    allow_id_dropping: bool
    has_leading_dimension: bool
    limits: Mapping[str, tuple[int, int]]
    minibatching: bool = False

    @property
    def num_sparse_cores(self) -> int:
        return self.global_devices * self.sparse_cores

    @property
    def local_sparse_cores(self) -> int:
        return self.local_devices * self.sparse_cores


@dataclass(frozen=True)
class _Feature:
    """One feature's batch as flat arrays: ids and float32 weights in input order, and the row
    of each id (``row_splits``: row ``r`` holds ids ``row_splits[r]:row_splits[r+1]``)."""

    values: IntArray
    weights: F32Array | None
    row_splits: IntArray

    @property
    def rows(self) -> int:
        return int(self.row_splits.shape[0]) - 1


def preprocess(  # noqa: PLR0913 - the issue's signature, mirroring jax-tpu-embedding's
    stacking: Stacking,
    features: Mapping[str, Ids],
    weights: Mapping[str, Any] | None = None,
    *,
    local_devices: int,
    global_devices: int | None = None,
    sparse_cores_per_device: int | None = None,
    allow_id_dropping: bool = False,
    has_leading_dimension: bool = True,
    limits: Mapping[str, tuple[int, int]] | None = None,
    mode: Literal["jax", "tensorflow"] = "jax",
    enable_minibatching: bool = False,
) -> PreprocessedBatch:
    """Preprocess one host's batch for every stacked table of ``stacking``.

    ``features`` maps each feature of the stacking (``FeatureSlot.name``) to its ids: a dense
    integer array ``[batch, k]`` or a ragged pair ``(values, row_splits)``; ``weights`` the same
    shapes in float (a feature left out, or ``weights=None``, weighs 1). ``local_devices`` is
    the number of devices this host feeds; ``global_devices`` and ``sparse_cores_per_device``
    default to the stacking's and must match it. ``limits`` overrides ``(max_ids_per_partition,
    max_unique_ids_per_partition)`` by stack name. With ``has_leading_dimension`` the CSR arrays
    are ``[local_devices, size]``, else flat (jax-tpu-embedding's ``jit`` layout).

    ``mode="jax"`` is jax-tpu-embedding 0.2.0's ``preprocess_sparse_dense_matmul_input``;
    ``mode="tensorflow"`` runs TensorFlow's rules (``sparsecore.tf_preprocess``). With
    ``enable_minibatching`` a batch within its limits is laid out as jax-tpu-embedding lays out
    one minibatch; a batch it would split raises :class:`SparseCoreUnsupportedError`. Raises
    :class:`SparseCoreLimitError` where jax-tpu-embedding aborts on a limit,
    :class:`SparseCoreBufferError` on a buffer size it aborts on, and
    :class:`SparseCoreInputError` on input it would accept silently but wrongly (negative ids,
    ids outside the vocabulary, float ids, weights of another shape, unknown combiners).
    """
    if mode == "tensorflow":
        module = importlib.import_module("tpuemb_cfg.sparsecore.tf_preprocess")
        result: PreprocessedBatch = module.preprocess_tensorflow(
            stacking, features, weights, local_devices=local_devices,
            global_devices=global_devices, sparse_cores_per_device=sparse_cores_per_device,
            allow_id_dropping=allow_id_dropping, has_leading_dimension=has_leading_dimension,
            limits=limits, enable_minibatching=enable_minibatching)
        return result
    if mode != "jax":
        raise SparseCoreInputError(f"unknown preprocessing mode {mode!r}: expected 'jax' or "
                                   "'tensorflow'", reason="mode")
    opts = replace(_options(stacking, local_devices, global_devices, sparse_cores_per_device,
                            allow_id_dropping, has_leading_dimension, limits),
                   minibatching=bool(enable_minibatching))
    if opts.minibatching and opts.local_devices < opts.global_devices:
        raise SparseCoreUnsupportedError(
            "enable_minibatching=True with several hosts (local_devices "
            f"{opts.local_devices} < global_devices {opts.global_devices}): the hosts agree on "
            "the minibatches through jax-tpu-embedding's all_reduce_interface, which tpuemb "
            "does not model; preprocess one host's whole slice, or without minibatching")
    inputs = _read_features(stacking, features, weights)
    # Every stack's buffer is sized before any id is looked at, as jax-tpu-embedding does (a
    # bad suggestion is reported even when another stack's limits would fail too).
    sizes = {stack.name: _check_stack(stack, opts) for stack in stacking.stacks}
    counted = {stack.name: _count(stack, stacking.features_of(stack.name), inputs, opts,
                                  sizes[stack.name]) for stack in stacking.stacks}
    if opts.minibatching:
        _check_one_minibatch(stacking, counted, sizes)
    stacks = {stack.name: _finish(stack, stacking.features_of(stack.name), inputs, opts,
                                  sizes[stack.name], *counted.pop(stack.name))
              for stack in stacking.stacks}
    return PreprocessedBatch(stacks=stacks, num_minibatches=1)


def buffer_sizes(stack: Stack, *, global_devices: int, sparse_cores_per_device: int,
                 max_ids_per_partition: int | None = None,
                 enable_minibatching: bool = False) -> tuple[int, int]:
    """``(theoretical_max, coo_buffer_size_per_device)`` of a stacked table.

    theoretical_max = roundup8(max_ids_per_partition) x S x N: every SparseCore of a device
    sending a full, 8-aligned run to each of the N partitions (x 64 with minibatching, room
    for 64 minibatches). The buffer is the theoretical maximum, or the stack's suggestion
    rounded up to a multiple of 8 S (never raised to what a batch needs: a batch that needs
    more loses ids, see :func:`preprocess`). Raises
    :class:`SparseCoreBufferError` where jax-tpu-embedding aborts: a suggestion above the
    theoretical maximum, a size of 0 (``max_ids_per_partition`` 0) or not below 2^31 - 1.
    """
    n = global_devices * sparse_cores_per_device
    max_ids = stack.max_ids_per_partition if max_ids_per_partition is None \
        else max_ids_per_partition
    theoretical = _round8(max_ids) * sparse_cores_per_device * n * \
        (MINIBATCHES if enable_minibatching else 1)
    suggested = stack.suggested_coo_buffer_size_per_device
    size = theoretical
    if suggested is not None:
        if suggested > theoretical:
            raise SparseCoreBufferError(
                f"stacked table {stack.name!r}: suggested_coo_buffer_size_per_device "
                f"{suggested} is larger than the theoretical maximum {theoretical} "
                f"(roundup8(max_ids_per_partition {max_ids}) x {sparse_cores_per_device} "
                f"SparseCores per device x {n} SparseCores); lower the suggestion to at most "
                f"{theoretical} or raise max_ids_per_partition", stack=stack.name,
                size=suggested, theoretical_max=theoretical)
        align = 8 * sparse_cores_per_device
        size = -(-suggested // align) * align
    if not 0 < size < _INT32_MAX:
        raise SparseCoreBufferError(
            f"stacked table {stack.name!r}: the COO buffer would hold {size} ids per device, "
            f"outside (0, 2^31 - 1); max_ids_per_partition is {max_ids} - set it (and the "
            "suggested buffer size) to at least 1 and small enough for int32 offsets",
            stack=stack.name, size=size, theoretical_max=theoretical)
    return theoretical, size


# ---------------------------------------------------------------- options and input checks

def _options(stacking: Stacking, local_devices: int, global_devices: int | None,  # noqa: PLR0913
             sparse_cores: int | None, allow_id_dropping: bool, has_leading_dimension: bool,
             limits: Mapping[str, tuple[int, int]] | None) -> _Options:
    """The options checked against the stacking (the keyword arguments of :func:`preprocess`)."""
    if global_devices is None:
        global_devices = stacking.num_partitions
    if sparse_cores is None:
        sparse_cores = stacking.sparse_cores_per_partition
    if global_devices != stacking.num_partitions or \
            sparse_cores != stacking.sparse_cores_per_partition:
        raise SparseCoreInputError(
            f"the stacking was made for {stacking.num_partitions} devices x "
            f"{stacking.sparse_cores_per_partition} SparseCores, but preprocessing was asked "
            f"for {global_devices} x {sparse_cores}: the ids' partitions (col_shift) depend on "
            "the SparseCore count, so stack the tables again for this slice", reason="topology")
    if not 1 <= local_devices <= global_devices:
        raise SparseCoreInputError(
            f"local_devices is {local_devices}: expected 1 to global_devices "
            f"({global_devices})", reason="topology")
    n = global_devices * sparse_cores
    if n & (n - 1):
        raise SparseCoreInputError(
            f"the slice has {n} SparseCores ({global_devices} devices x {sparse_cores}); "
            "jax-tpu-embedding needs a power of two (ids are spread by id mod N) - use a "
            "power-of-two device count", reason="topology")
    chosen = dict(limits or {})
    known = {s.name for s in stacking.stacks}
    unknown = sorted(set(chosen) - known)
    if unknown:
        raise SparseCoreInputError(
            f"limits names {', '.join(map(repr, unknown))}, which is not a stacked table; "
            f"the stacks are {', '.join(map(repr, sorted(known)))}", reason="limits")
    for name, pair in chosen.items():
        if len(pair) != 2 or any(not isinstance(v, int | np.integer) or v < 0 for v in pair):
            raise SparseCoreInputError(
                f"limits[{name!r}] is {pair!r}: expected (max_ids_per_partition, "
                "max_unique_ids_per_partition), two non-negative integers", reason="limits",
                stack=name)
    return _Options(local_devices, global_devices, sparse_cores, bool(allow_id_dropping),
                    bool(has_leading_dimension), {k: (int(a), int(b)) for k, (a, b) in
                                                  chosen.items()})


def _read_features(stacking: Stacking, features: Mapping[str, Ids],
                   weights: Mapping[str, Any] | None) -> dict[str, _Feature]:
    """Every feature of the stacking as flat arrays, its ids checked against its table."""
    names = [f.name for f in stacking.features]
    missing = [n for n in names if n not in features]
    if missing:
        raise SparseCoreInputError(
            f"no ids for feature(s) {', '.join(map(repr, missing))} of the stacking; pass "
            "every feature's ids", reason="features")
    extra = sorted(set(features) - set(names))
    extra_w = sorted(set(weights or {}) - set(names))
    if extra or extra_w:
        raise SparseCoreInputError(
            f"feature(s) {', '.join(map(repr, extra or extra_w))} of the "
            f"{'ids' if extra else 'weights'} are not in the stacking; its features are "
            f"{', '.join(map(repr, names))}", reason="features")
    vocab = {t.name: t.vocabulary_size for s in stacking.stacks for t in s.tables}
    out = {}
    for slot in stacking.features:
        feature = _flatten(slot.name, features[slot.name], (weights or {}).get(slot.name))
        _check_ids(slot, feature.values, vocab[slot.table])
        out[slot.name] = feature
    return out


def _flatten(name: str, ids: Ids, weights: Any) -> _Feature:
    """A feature's ids and weights as flat arrays with row splits (dense or ragged input)."""
    if isinstance(ids, tuple):
        if len(ids) != 2:
            raise SparseCoreInputError(
                f"feature {name!r}: a ragged feature is a pair (values, row_splits), got a "
                f"tuple of {len(ids)}", reason="ids")
        values = _int_array(name, ids[0], "values")
        splits = _int_array(name, ids[1], "row_splits")
        if values.ndim != 1 or splits.ndim != 1 or splits.shape[0] < 1 or splits[0] != 0 or \
                splits[-1] != values.shape[0] or np.any(np.diff(splits) < 0):
            raise SparseCoreInputError(
                f"feature {name!r}: row_splits must be 1-D, start at 0, never decrease and end "
                f"at len(values) ({values.shape[0]}); got {splits.shape[0]} splits ending at "
                f"{int(splits[-1]) if splits.size else None}", reason="ids")
        shape: tuple[int, ...] = values.shape
    else:
        dense = _int_array(name, ids, "ids")
        if dense.ndim != 2:
            raise SparseCoreInputError(
                f"feature {name!r}: dense ids must be 2-D [batch, ids per row], got shape "
                f"{dense.shape} (reshape a 1-D batch with ids.reshape(-1, 1))", reason="ids")
        rows, k = dense.shape
        values = dense.reshape(-1)
        splits = np.arange(rows + 1, dtype=np.int64) * k
        shape = dense.shape
    return _Feature(values, _weights(name, weights, shape, splits), splits)


def _int_array(name: str, value: Any, what: str) -> IntArray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise SparseCoreInputError(
            f"feature {name!r}: {what} must be integers, got dtype {array.dtype} "
            "(jax-tpu-embedding truncates float ids silently: 1.5 becomes 1); convert with "
            ".astype(np.int64) after checking the values are whole", reason="ids")
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise SparseCoreInputError(f"feature {name!r}: {what} holds values beyond int64",
                                   reason="ids")
    return array.astype(np.int64, copy=False)


def _weights(name: str, weights: Any, shape: tuple[int, ...],
             splits: IntArray) -> F32Array | None:
    """Float32 weights laid out as the ids; None (all 1) when none were given."""
    if weights is None:
        return None
    if isinstance(weights, tuple):
        if len(weights) != 2 or not np.array_equal(np.asarray(weights[1]), splits):
            raise SparseCoreInputError(
                f"feature {name!r}: ragged weights must be (values, row_splits) with the ids' "
                "row_splits", reason="weights")
        weights = weights[0]
    array = np.asarray(weights)
    if array.shape != shape:
        raise SparseCoreInputError(
            f"feature {name!r}: weights have shape {array.shape}, the ids {shape}; give one "
            "weight per id (jax-tpu-embedding reads mismatched weights without a check)",
            reason="weights")
    if array.dtype.kind not in "fiu":
        raise SparseCoreInputError(
            f"feature {name!r}: weights must be numbers, got dtype {array.dtype}",
            reason="weights")
    return array.astype(np.float32, copy=False).reshape(-1)


def _check_ids(slot: FeatureSlot, values: IntArray, vocabulary: int) -> None:
    """Refuse ids jax-tpu-embedding would map silently to the wrong row."""
    if not values.size:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0:
        raise SparseCoreInputError(
            f"feature {slot.name!r} (table {slot.table!r}): id {low} is negative; ids must be "
            f"0 to {vocabulary - 1} (jax-tpu-embedding sends a negative id to a wrong row "
            "without a check) - remove or remap padding ids before preprocessing",
            reason="ids", stack=slot.stack)
    if high >= vocabulary:
        wrap = (" and beyond int32 (jax-tpu-embedding casts ids to int32: 2^33 becomes 0)"
                if high > _INT32_MAX else "")
        raise SparseCoreInputError(
            f"feature {slot.name!r} (table {slot.table!r}): id {high} is outside the "
            f"vocabulary of {vocabulary} rows{wrap}; ids must be 0 to {vocabulary - 1} "
            "(jax-tpu-embedding reads another table's row or padding without a check)",
            reason="ids", stack=slot.stack)


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
           opts: _Options, sizes: _Sizes) -> tuple[_Merged, _Stats]:
    """Steps 1-6, then the limit check when ids may not be dropped (with minibatching an
    exceeded limit means a split instead: :func:`_check_one_minibatch`)."""
    merged = _merge(_entries(stack, slots, inputs, opts), opts.num_sparse_cores)
    stats = _statistics(merged, opts)
    if not opts.allow_id_dropping and not opts.minibatching:
        _check_limits(stack, stats, sizes.max_ids, sizes.max_unique, opts)
    return merged, stats


def _check_one_minibatch(stacking: Stacking, counted: Mapping[str, tuple[_Merged, _Stats]],
                         sizes: Mapping[str, _Sizes]) -> None:
    """With minibatching, jax-tpu-embedding keeps the batch in one minibatch when no stack
    exceeds a limit (then only the layout changes); otherwise it splits every stack's ids into
    minibatches by buckets of embedding ids, which tpuemb does not reproduce."""
    for stack in stacking.stacks:
        stats, size = counted[stack.name][1], sizes[stack.name]
        ids, unique = int(stats.entries.max(initial=0)), int(stats.distinct.max(initial=0))
        if ids > size.max_ids or unique > size.max_unique:
            raise SparseCoreUnsupportedError(
                f"stacked table {stack.name!r}: a SparseCore sends {ids} ids ({unique} "
                f"distinct) to one partition, above its limits ({size.max_ids}, "
                f"{size.max_unique}); with enable_minibatching=True jax-tpu-embedding would "
                "split the batch into minibatches by buckets of embedding ids, which tpuemb "
                "does not reproduce - preprocess without minibatching to see the drops, or "
                "raise the limits")


def _finish(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
            opts: _Options, sizes: _Sizes, merged: _Merged, stats: _Stats) -> PreprocessedStack:
    """Steps 7-9: drops, the CSR arrays and the per-id drop flags."""
    max_ids, max_unique = sizes.max_ids, sizes.max_unique
    theoretical, coo_size = sizes.theoretical, sizes.coo_size
    kept = _drop(merged, stats, max_ids, max_unique, coo_size // opts.sparse_cores, opts)
    csr = _csr(merged, kept, coo_size, opts)
    dropped_raw = np.empty(merged.order.shape[0], bool)
    dropped_raw[merged.order] = ~kept.keep[merged.group]
    per_feature: dict[str, BoolArray] = {}
    start = 0
    for slot in slots:
        n = inputs[slot.name].values.shape[0]
        per_feature[slot.name] = dropped_raw[start:start + n]
        start += n
    return PreprocessedStack(
        stack=stack.name,
        max_ids_per_partition=stats.max_ids,
        max_unique_ids_per_partition=stats.max_unique,
        required_buffer_size_per_sc=stats.required,
        id_drop_count=kept.drop_count,
        coo_buffer_size_per_device=coo_size,
        row_pointers=csr.row_pointers, embedding_ids=csr.embedding_ids,
        sample_ids=csr.sample_ids, gains=csr.gains, valid_mask=csr.valid_mask,
        dropped=per_feature, theoretical_max_coo_buffer_size=theoretical)


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
        if feature.rows % cores:
            raise SparseCoreInputError(
                f"feature {slot.name!r} (stacked table {stack.name!r}): its batch of "
                f"{feature.rows} rows does not divide into {opts.local_devices} local devices "
                f"x {opts.sparse_cores} SparseCores; each SparseCore takes an equal slice of "
                f"rows - use a batch that is a multiple of {cores} (jax-tpu-embedding aborts "
                "when a device's rows do not divide by its SparseCores, and ignores the rows "
                "left over when the batch does not divide by the devices)",
                reason="batch", stack=stack.name)
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
    n, cores = opts.num_sparse_cores, opts.local_sparse_cores
    entries = np.bincount(m.run, minlength=cores * n).reshape(cores, n)
    distinct = np.bincount(m.run[m.new_column], minlength=cores * n).reshape(cores, n)
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
    if opts.minibatching:
        # One minibatch: the device's SparseCores write one after the other into the buffer.
        need = _round8(kept).reshape(opts.local_devices, -1).sum(axis=1)
        if int(need.max(initial=0)) > capacity * opts.sparse_cores:
            raise SparseCoreUnsupportedError(
                f"a device needs {int(need.max())} COO entries, more than the buffer of "
                f"{capacity * opts.sparse_cores} (the suggested size); with minibatching "
                "tpuemb does not reproduce what jax-tpu-embedding does then - raise "
                "suggested_coo_buffer_size_per_device or preprocess without minibatching")
        return _Kept(keep, kept, drop_count)
    # Partition p starts at sum_{q<p} roundup8(kept_q): while that is within the capacity the
    # run keeps min(kept, room); past it nothing fits (capacity is a multiple of 8).
    start = np.cumsum(_round8(kept), axis=1) - _round8(kept)
    written = np.clip(capacity - start, 0, kept)
    if int(written.sum()) < int(kept.sum()):
        fits = _rank_in_run(keep, m.run, runs) <= written.reshape(-1)[m.run]
        drop_count += int((keep & ~fits).sum())
        keep &= fits
    return _Kept(keep, written, drop_count)


@dataclass(frozen=True)
class _Csr:
    row_pointers: npt.NDArray[np.int32]
    embedding_ids: npt.NDArray[np.int32]
    sample_ids: npt.NDArray[np.int32]
    gains: F32Array
    valid_mask: BoolArray


def _csr(m: _Merged, kept: _Kept, coo_size: int, opts: _Options) -> _Csr:
    """Per device ``S`` segments of ``coo_size / S`` entries; SparseCore s writes partition p
    from ``start[p] = sum_{q<p} roundup8(written_q)`` and its row-pointer slot p holds the end;
    slots N..max(N, 8)-1 repeat roundup8 of the last end. Unwritten entries are 0."""
    n, cores, devices = opts.num_sparse_cores, opts.local_sparse_cores, opts.local_devices
    capacity = coo_size // opts.sparse_cores
    written = kept.written
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
    # The kept entries, in sorted order, are each run's written entries in turn.
    every = bool(kept.keep.all())
    runs, column, sample, gain = (a if every else a[kept.keep]
                                  for a in (m.run, m.column, m.sample, m.gain))
    flat = written.reshape(-1)
    first = np.cumsum(flat) - flat
    where = base.reshape(-1)[runs] - first[runs]
    where += np.arange(runs.shape[0], dtype=np.int64)
    total = devices * coo_size
    embedding_ids = np.zeros(total, np.int32)
    sample_ids = np.zeros(total, np.int32)
    gains = np.zeros(total, np.float32)
    valid = np.zeros(total, bool)
    embedding_ids[where] = column
    sample_ids[where] = sample
    gains[where] = gain
    valid[where] = True
    shape = (devices, -1) if opts.has_leading_dimension else (-1,)
    return _Csr(pointers.astype(np.int32).reshape(shape), embedding_ids.reshape(shape),
                sample_ids.reshape(shape), gains.reshape(shape), valid.reshape(shape))


def _round8(x: Any) -> Any:
    """``x`` rounded up to a multiple of 8 (ints or integer arrays)."""
    return (x + 7) // 8 * 8

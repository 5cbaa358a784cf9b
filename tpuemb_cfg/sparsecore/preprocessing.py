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
   are written in order, each starting at a multiple of 8 (the slots before it padded with
   embedding and sample id 2^31 - 1 and gain NaN, as the reference pads them), and what does
   not fit is dropped,
   silently and whatever ``allow_id_dropping`` says (jax-tpu-embedding does the same). With
   minibatching (one minibatch), a device's SparseCores write one after the other instead.
8. **Minibatches.** With minibatching, a batch above a limit is split instead of checked
   (the section "minibatches" below; the statistics stay those of steps 1-5).

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
from tpuemb_cfg.sparsecore._args import check_preprocess, check_str
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
    """A case tpuemb does not reproduce: minibatching across hosts (the hosts agree on the
    split through an all-reduce)."""


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
    one minibatch, and a batch above them is split into minibatches as it splits it (one host
    only: :class:`SparseCoreUnsupportedError` when ``local_devices < global_devices``). Raises
    :class:`SparseCoreLimitError` where jax-tpu-embedding aborts on a limit,
    :class:`SparseCoreBufferError` on a buffer size it aborts on, and
    :class:`SparseCoreInputError` on input it would accept silently but wrongly (negative ids,
    ids outside the vocabulary, float ids, weights of another shape, unknown combiners).
    """
    check_preprocess("preprocess", stacking, features, weights, local_devices=local_devices,
                     global_devices=global_devices,
                     sparse_cores_per_device=sparse_cores_per_device, limits=limits,
                     flags={"allow_id_dropping": allow_id_dropping,
                            "has_leading_dimension": has_leading_dimension,
                            "enable_minibatching": enable_minibatching})
    check_str("preprocess", "mode", mode, ("jax", "tensorflow"))
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
    if opts.minibatching and _split_needed(stacking, counted, sizes):
        return _preprocess_split(stacking, inputs, opts, sizes, counted)
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


def _flatten(name: str, ids: Ids, weights: Any, *,
             error: type[SparseCoreInputError] = SparseCoreInputError) -> _Feature:
    """A feature's ids and weights as flat arrays with row splits (dense or ragged input); bad
    input raises ``error`` (TensorFlow's mode reads batches with this too)."""
    if isinstance(ids, tuple):
        if len(ids) != 2:
            raise error(
                f"feature {name!r}: a ragged feature is a pair (values, row_splits), got a "
                f"tuple of {len(ids)}", reason="ids")
        values = _int_array(name, ids[0], "values", error)
        splits = _int_array(name, ids[1], "row_splits", error)
        if values.ndim != 1 or splits.ndim != 1 or splits.shape[0] < 1 or splits[0] != 0 or \
                splits[-1] != values.shape[0] or np.any(np.diff(splits) < 0):
            raise error(
                f"feature {name!r}: row_splits must be 1-D, start at 0, never decrease and end "
                f"at len(values) ({values.shape[0]}); got {splits.shape[0]} splits ending at "
                f"{int(splits[-1]) if splits.size else None}", reason="ids")
        shape: tuple[int, ...] = values.shape
    else:
        dense = _int_array(name, ids, "ids", error)
        if dense.ndim != 2:
            raise error(
                f"feature {name!r}: dense ids must be 2-D [batch, ids per row], got shape "
                f"{dense.shape} (reshape a 1-D batch with ids.reshape(-1, 1))", reason="ids")
        rows, k = dense.shape
        values = dense.reshape(-1)
        splits = np.arange(rows + 1, dtype=np.int64) * k
        shape = dense.shape
    return _Feature(values, _weights(name, weights, shape, splits, error), splits)


def _int_array(name: str, value: Any, what: str,
               error: type[SparseCoreInputError]) -> IntArray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise error(
            f"feature {name!r}: {what} must be integers, got dtype {array.dtype} "
            "(both references truncate float ids silently: 1.5 becomes 1); convert with "
            ".astype(np.int64) after checking the values are whole", reason="ids")
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise error(f"feature {name!r}: {what} holds values beyond int64", reason="ids")
    return array.astype(np.int64, copy=False)


def _weights(name: str, weights: Any, shape: tuple[int, ...], splits: IntArray,
             error: type[SparseCoreInputError]) -> F32Array | None:
    """Float32 weights laid out as the ids; None (all 1) when none were given."""
    if weights is None:
        return None
    if isinstance(weights, tuple):
        if len(weights) != 2 or not np.array_equal(np.asarray(weights[1]), splits):
            raise error(
                f"feature {name!r}: ragged weights must be (values, row_splits) with the ids' "
                "row_splits", reason="weights")
        weights = weights[0]
    array = np.asarray(weights)
    if array.shape != shape:
        raise error(
            f"feature {name!r}: weights have shape {array.shape}, the ids {shape}; give one "
            "weight per id (jax-tpu-embedding reads mismatched weights without a check)",
            reason="weights")
    if array.dtype.kind not in "fiu":
        raise error(
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
    exceeded limit means a split instead: :func:`_preprocess_split`)."""
    merged = _merge(_entries(stack, slots, inputs, opts), opts.num_sparse_cores)
    stats = _statistics(merged, opts)
    if not opts.allow_id_dropping and not opts.minibatching:
        _check_limits(stack, stats, sizes.max_ids, sizes.max_unique, opts)
    return merged, stats


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
        padding_mask=csr.padding_mask, dropped=per_feature,
        theoretical_max_coo_buffer_size=theoretical)


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
    # Partition p starts at sum_{q<p} roundup8(kept_q): while that is within the room the run
    # keeps min(kept, room); past it nothing fits (the room is a multiple of 8). With
    # minibatching (one minibatch) a device's SparseCores write one after the other into the
    # device's whole buffer, so the sums run over the device's (SparseCore, partition) runs.
    per_row = opts.sparse_cores if opts.minibatching else 1  # SparseCores sharing a sequence
    rows: IntArray = kept.reshape(opts.local_sparse_cores // per_row, -1)
    room = capacity * per_row
    start = np.cumsum(_round8(rows), axis=1) - _round8(rows)
    written = np.clip(room - start, 0, rows).reshape(kept.shape)
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
    padding_mask: BoolArray


def _csr(m: _Merged, kept: _Kept, coo_size: int, opts: _Options) -> _Csr:
    """Per device ``S`` segments of ``coo_size / S`` entries; SparseCore s writes partition p
    from ``start[p] = sum_{q<p} roundup8(written_q)`` and its row-pointer slot p holds the end;
    slots N..max(N, 8)-1 repeat roundup8 of the last end. The slots from each run's end to the
    next multiple of 8 are padding (:func:`_fill`); the slots never written are 0."""
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
    ends = base.reshape(-1) + flat  # each run's end in the flat buffer of all devices
    return _fill(pointers, (where, column, sample, gain), _padding(ends), devices * coo_size,
                 opts)


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
    embedding_ids = np.zeros(total, np.int32)
    sample_ids = np.zeros(total, np.int32)
    gains = np.zeros(total, np.float32)
    valid = np.zeros(total, bool)
    padded = np.zeros(total, bool)
    embedding_ids[padding] = _INT32_MAX
    sample_ids[padding] = _INT32_MAX
    gains[padding] = np.nan
    padded[padding] = True
    embedding_ids[where] = column
    sample_ids[where] = sample
    gains[where] = gain
    valid[where] = True
    shape = (opts.local_devices, -1) if opts.has_leading_dimension else (-1,)
    return _Csr(pointers.astype(np.int32).reshape(shape), embedding_ids.reshape(shape),
                sample_ids.reshape(shape), gains.reshape(shape), valid.reshape(shape),
                padded.reshape(shape))


def _round8(x: Any) -> Any:
    """``x`` rounded up to a multiple of 8 (ints or integer arrays)."""
    return (x + 7) // 8 * 8


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
                      sizes: Mapping[str, _Sizes],
                      counted: Mapping[str, tuple[_Merged, _Stats]]) -> PreprocessedBatch:
    """jax-tpu-embedding's second pass: every stack's entries bucketed, a bucket above a
    limit aborts (without ``allow_id_dropping``), the split chosen over all stacks, then each
    stack dropped per bucket and laid out by minibatches. The statistics stay the first
    pass's (the whole batch, as without minibatching)."""
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
                                        bucketed[stack.name], minibatch)
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


def _finish_split(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
                  opts: _Options, size: _Sizes, counted: tuple[_Merged, _Stats], b: _Bucketed,
                  minibatch: IntArray) -> PreprocessedStack:
    m, stats = counted
    limit_drops = 0
    sel = b.order
    if opts.allow_id_dropping:  # the limits apply per (SparseCore, partition, bucket)
        rank = _rank_in_groups(np.ones(sel.shape[0], bool), b.group)
        unique_rank = _rank_in_groups(m.new_column[sel], b.group)
        keep = (rank <= size.max_ids) & (unique_rank <= size.max_unique)
        limit_drops = int(m.count[sel[~keep]].sum())
        sel = sel[keep]
    csr, written = _csr_split(m, _Minibatched(sel, minibatch[b.bucket[sel]],
                                              int(minibatch[-1]) + 1), size.coo_size, opts)
    kept = np.zeros(m.run.shape[0], bool)
    kept[written] = True
    dropped_raw = np.empty(m.order.shape[0], bool)
    dropped_raw[m.order] = ~kept[m.group]
    per_feature: dict[str, BoolArray] = {}
    start = 0
    for slot in slots:
        count = inputs[slot.name].values.shape[0]
        per_feature[slot.name] = dropped_raw[start:start + count]
        start += count
    buffer_drops = sel.shape[0] - written.shape[0]
    return PreprocessedStack(
        stack=stack.name,
        max_ids_per_partition=stats.max_ids,
        max_unique_ids_per_partition=stats.max_unique,
        required_buffer_size_per_sc=stats.required,
        id_drop_count=limit_drops + buffer_drops,
        coo_buffer_size_per_device=size.coo_size,
        row_pointers=csr.row_pointers, embedding_ids=csr.embedding_ids,
        sample_ids=csr.sample_ids, gains=csr.gains, valid_mask=csr.valid_mask,
        padding_mask=csr.padding_mask, dropped=per_feature,
        theoretical_max_coo_buffer_size=size.theoretical)


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

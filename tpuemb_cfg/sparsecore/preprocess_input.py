"""What SparseCore host preprocessing reads and refuses: its errors, options and the batch of each
feature as flat arrays (:mod:`tpuemb_cfg.sparsecore.preprocessing` runs jax-tpu-embedding's rules
on them, :mod:`tpuemb_cfg.sparsecore.tf_preprocess` TensorFlow's), and the COO buffer sizes of a
stacked table (:func:`buffer_sizes`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.base.errors import TpuembError
from tpuemb_cfg.base.sparsecore_defaults import MAX_MINIBATCHES, theoretical_coo_buffer
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, Stacking

__all__ = [
    "COMBINERS", "MINIBATCHES", "SparseCoreBufferError", "SparseCoreInputError",
    "SparseCoreLimitError", "SparseCoreUnsupportedError", "buffer_sizes",
]

#: The combiners whose gains jax-tpu-embedding computes (it treats any other name as "sum").
COMBINERS = ("sum", "mean", "sqrtn")

#: With minibatching, buffers and row pointers have room for this many minibatches.
MINIBATCHES = MAX_MINIBATCHES

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
    theoretical = theoretical_coo_buffer(max_ids, sparse_cores_per_device, n,
                                         minibatching=enable_minibatching)
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


def _round8(x: Any) -> Any:
    """``x`` rounded up to a multiple of 8 (ints or integer arrays)."""
    return (x + 7) // 8 * 8


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
                   weights: Mapping[str, Any] | None, *,
                   int32: bool = False) -> dict[str, _Feature]:
    """Every feature of the stacking as flat arrays, its ids checked against its table: int64,
    or with ``int32`` int32 ids kept as given (the compiled engine reads either; no copy)."""
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
        feature = _flatten(slot.name, features[slot.name], (weights or {}).get(slot.name),
                           int32=int32)
        _check_ids(slot, feature.values, vocab[slot.table])
        out[slot.name] = feature
    return out


def _flatten(name: str, ids: Ids, weights: Any, *,
             error: type[SparseCoreInputError] = SparseCoreInputError,
             int32: bool = False) -> _Feature:
    """A feature's ids and weights as flat arrays with row splits (dense or ragged input; ids
    int64, or int32 ones kept with ``int32``); bad input raises ``error`` (TensorFlow's mode
    reads batches with this too)."""
    if isinstance(ids, tuple):
        if len(ids) != 2:
            raise error(
                f"feature {name!r}: a ragged feature is a pair (values, row_splits), got a "
                f"tuple of {len(ids)}", reason="ids")
        values = _int_array(name, ids[0], "values", error, int32)
        splits = _int_array(name, ids[1], "row_splits", error)
        if values.ndim != 1 or splits.ndim != 1 or splits.shape[0] < 1 or splits[0] != 0 or \
                splits[-1] != values.shape[0] or np.any(np.diff(splits) < 0):
            raise error(
                f"feature {name!r}: row_splits must be 1-D, start at 0, never decrease and end "
                f"at len(values) ({values.shape[0]}); got {splits.shape[0]} splits ending at "
                f"{int(splits[-1]) if splits.size else None}", reason="ids")
        shape: tuple[int, ...] = values.shape
    else:
        dense = _int_array(name, ids, "ids", error, int32)
        if dense.ndim != 2:
            raise error(
                f"feature {name!r}: dense ids must be 2-D [batch, ids per row], got shape "
                f"{dense.shape} (reshape a 1-D batch with ids.reshape(-1, 1))", reason="ids")
        rows, k = dense.shape
        values = dense.reshape(-1)
        splits = np.arange(rows + 1, dtype=np.int64) * k
        shape = dense.shape
    return _Feature(values, _weights(name, weights, shape, splits, error), splits)


def _int_array(name: str, value: Any, what: str, error: type[SparseCoreInputError],
               int32: bool = False) -> IntArray:
    array = np.asarray(value)
    if int32 and array.dtype == np.int32:
        return array
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

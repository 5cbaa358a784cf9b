"""TensorFlow 2.21's host preprocessing for the SparseCores, as ``TPUEmbeddingV2.enqueue`` runs it.

TensorFlow's kernels have no CPU build (the wheel registers the ops without kernels), so this
module follows their source, ``tensorflow/core/tpu/kernels/sparse_core_preprocess_ops.cc`` and
``sparse_core_ops_utils.cc``, op by op. ``TPUEmbeddingV2`` (``tpu_embedding_v3.py``, 2.21) runs,
per chip (a *device* here) and stacked table:

1. ``ConvertToListOfSparseCoreCooTensors``, per feature: row ``r`` of the device's ``B`` samples
   goes to SparseCore ``s = r div (B / S)``; **only adjacent repeats** (the same id twice in a row
   of the input) merge, their weights summed; the gain is ``w x scale(row)`` with scale 1 (sum),
   ``1 / sum(w)`` (mean) or ``1 / sqrt(sum(w^2))`` (sqrtn) over the whole row, **0 when the sum is
   0** (jax-tpu-embedding gives inf/NaN); the sample becomes ``r mod (B/S) + row_offset / S`` and
   the id the column ``((x + col_shift) & (N-1)) + (x & ~(N-1)) + col_offset``.
2. ``SortListOfSparseCoreCooTensors``, per SparseCore: the features of one table (same
   ``col_offset``) are concatenated and sorted by (column, position); equal (sample, column)
   neighbours merge (gains summed), which after step 1 merges every repeat of a (sample, id).
   Per partition ``p = column & (N-1)`` it counts entries and distinct columns and **fails when
   either exceeds the stacked table's limit**: TensorFlow has no dropping by limit here
   (``allow_id_dropping`` does not apply), so tpuemb raises :class:`TensorFlowLimitError`.
   The entries are written partition by partition: sample ``mod`` the SparseCore's batch, token
   ``column >> log2 N`` (= ``x div N + row_offset_in_shard``).
3. ``ConvertToSparseCoreCsrWrappedCooTensor`` (no minibatching: ``TPUEmbeddingV2`` passes
   ``splits=0``): **one buffer per device** of ``max_ids_per_chip = max_ids_per_chip_per_sample x
   samples`` entries (64 x the stack's samples by default); SparseCore 0's partitions, then
   SparseCore 1's, ..., each partition's run padded to a multiple of 8 with ``2^31 - 1`` and the
   row pointers **absolute** (the end of each run, ``roundup8(N)`` slots per SparseCore, extra
   slots repeating the last end). What does not fit is dropped with ``allow_id_dropping``, else
   the op fails (:class:`TensorFlowBufferError`).

The result is the contract's :class:`PreprocessedBatch`; where its fields differ from
jax-tpu-embedding's (``preprocess.py``), the field's note in :func:`preprocess_tensorflow` says
how. Inputs follow ``preprocess``: per feature a dense int array ``[batch, k]`` or a ragged pair
``(values, row_splits)`` covering the local devices' batches one after the other; weights the same
shape. docs/sparsecore/stacking-tensorflow.md explains each rule and decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.errors import TpuembError
from tpuemb_cfg.sparsecore.results import PreprocessedBatch, PreprocessedStack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, Stacking

__all__ = [
    "DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE",
    "PAD_VALUE",
    "TensorFlowBufferError",
    "TensorFlowInputError",
    "TensorFlowLimitError",
    "preprocess_tensorflow",
]

#: ``SparseCoreEmbeddingConfig.max_ids_per_chip_per_sample`` (TensorFlow 2.21's default).
DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE = 64
#: ``kXlaPadValue``: what TensorFlow writes into the padding of the COO buffers.
PAD_VALUE = (1 << 31) - 1
_COMBINERS = ("sum", "mean", "sqrtn")

IntArray = npt.NDArray[np.int64]
F32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


class TensorFlowInputError(TpuembError, ValueError):
    """A batch or option TensorFlow's preprocessing refuses (its ``InvalidArgumentError``), or
    one it would read wrongly without a check, with the value found and the fix."""


class TensorFlowLimitError(TensorFlowInputError):
    """A SparseCore sends more ids (or distinct ids) to one partition than the stacked table's
    limit: ``SortListOfSparseCoreCooTensors`` fails the step (``InvalidArgumentError``), whatever
    ``allow_id_dropping`` says. ``observed``, ``limit``, ``device``, ``sparse_core``,
    ``partition`` say where."""

    def __init__(self, message: str, *, stack: str, limit_name: str, observed: int, limit: int,
                 where: tuple[int, int, int]) -> None:
        super().__init__(message)
        self.stack = stack
        self.limit_name = limit_name
        self.observed = observed
        self.limit = limit
        self.device, self.sparse_core, self.partition = where


class TensorFlowBufferError(TensorFlowInputError):
    """The device's ids do not fit ``max_ids_per_chip`` and ``allow_id_dropping`` is off
    (``ConvertToSparseCoreCsrWrappedCooTensor`` fails the step)."""


@dataclass(frozen=True)
class _Options:
    local_devices: int
    global_devices: int
    sparse_cores: int
    allow_id_dropping: bool
    has_leading_dimension: bool
    max_ids_per_chip_per_sample: int
    limits: Mapping[str, tuple[int, int]]

    @property
    def n(self) -> int:
        return self.global_devices * self.sparse_cores


@dataclass(frozen=True)
class _Feature:
    """One feature's ids for all local devices: flat values, float32 weights (None: all 1),
    and ``row_splits`` (row ``r`` holds ``values[row_splits[r]:row_splits[r+1]]``)."""

    values: IntArray
    weights: F32Array | None
    row_splits: IntArray


def preprocess_tensorflow(  # noqa: PLR0913 - preprocess()'s keywords, plus TensorFlow's one
    stacking: Stacking,
    features: Mapping[str, Any],
    weights: Mapping[str, Any] | None = None,
    *,
    local_devices: int,
    global_devices: int | None = None,
    sparse_cores_per_device: int | None = None,
    allow_id_dropping: bool = False,
    has_leading_dimension: bool = True,
    limits: Mapping[str, tuple[int, int]] | None = None,
    enable_minibatching: bool = False,
    max_ids_per_chip_per_sample: int = DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE,
) -> PreprocessedBatch:
    """Preprocess one host's batch as TensorFlow 2.21's ``TPUEmbeddingV2`` does.

    ``features``/``weights``: as :func:`tpuemb_cfg.sparsecore.preprocess.preprocess`. Each local
    device's slice must hold exactly the feature's ``samples`` rows (TensorFlow checks the row
    count against the output shape); a dense ``[batch, k]`` array is ``batch`` rows of ``k`` ids,
    or, when ``batch x k`` is the sample count, one id per sample (TensorFlow's own dense input).
    ``limits`` overrides ``(max_ids, max_unique_ids)`` per stack (TensorFlow:
    ``max_ids_per_table`` / ``max_unique_ids_per_table``, already in the stacking).

    Each :class:`PreprocessedStack` holds, per local device:
    ``max_ids_per_partition``/``max_unique_ids_per_partition`` ``[L, N]`` (most entries/distinct
    columns any SparseCore sends to the partition, after merging; TensorFlow itself only keeps
    the maximum), ``required_buffer_size_per_sc`` ``[L, S]`` (sum of the runs rounded up to 8:
    the buffer room each SparseCore takes), ``coo_buffer_size_per_device`` = ``max_ids_per_chip``,
    ``row_pointers`` ``[L, S x roundup8(N)]`` (absolute ends; TensorFlow allocates 64 x that and
    leaves the rest unwritten), ``embedding_ids``/``sample_ids``/``gains`` ``[L,
    max_ids_per_chip]`` with the padding TensorFlow writes (``PAD_VALUE``, also as a float gain)
    and 0 after the last run (unwritten in TensorFlow); ``valid_mask`` marks real entries;
    ``id_drop_count`` counts merged entries that did not fit (TensorFlow's count);
    ``dropped`` maps every input id to whether its entry was dropped.

    ``enable_minibatching=True`` is refused: ``TPUEmbeddingV2`` 2.21 always passes ``splits=0``.
    """
    if enable_minibatching:
        raise TensorFlowInputError(
            "enable_minibatching=True: TensorFlow 2.21's TPUEmbeddingV2 never splits a batch "
            "into minibatches (it passes splits=0 to ConvertToSparseCoreCsrWrappedCooTensor); "
            "preprocess with enable_minibatching=False")
    opts = _options(stacking, local_devices, global_devices, sparse_cores_per_device,
                    allow_id_dropping, has_leading_dimension, limits,
                    max_ids_per_chip_per_sample)
    inputs = _read_features(stacking, features, weights, opts)
    stacks = {stack.name: _preprocess_stack(stack, stacking.features_of(stack.name), inputs,
                                            opts)
              for stack in stacking.stacks}
    return PreprocessedBatch(stacks=stacks, num_minibatches=1)


# ---------------------------------------------------------------- options and inputs

def _options(stacking: Stacking, local_devices: int,  # noqa: PLR0913 - the keywords, checked
             global_devices: int | None, sparse_cores: int | None, allow_id_dropping: bool,
             has_leading_dimension: bool, limits: Mapping[str, tuple[int, int]] | None,
             max_ids_per_chip_per_sample: int) -> _Options:
    devices = stacking.num_partitions if global_devices is None else global_devices
    cores = stacking.sparse_cores_per_partition if sparse_cores is None else sparse_cores
    if (devices, cores) != (stacking.num_partitions, stacking.sparse_cores_per_partition):
        raise TensorFlowInputError(
            f"the stacking was made for {stacking.num_partitions} chips x "
            f"{stacking.sparse_cores_per_partition} SparseCores, but preprocessing was asked for "
            f"{devices} x {cores}; stack the tables again for this slice")
    if not 1 <= local_devices <= devices:
        raise TensorFlowInputError(
            f"local_devices is {local_devices}: expected 1 to global_devices ({devices})")
    n = devices * cores
    if n & (n - 1):
        raise TensorFlowInputError(
            f"the slice has {n} SparseCores ({devices} chips x {cores}); TensorFlow needs a "
            "power of two ('num_sc_shards is not a power of two') - use a power-of-two chip "
            "count")
    if max_ids_per_chip_per_sample < 1:
        raise TensorFlowInputError(
            f"max_ids_per_chip_per_sample is {max_ids_per_chip_per_sample}: expected at least 1 "
            "(TensorFlow's default is 64)")
    known = {s.name for s in stacking.stacks}
    chosen = dict(limits or {})
    for name, pair in chosen.items():
        if name not in known:
            raise TensorFlowInputError(
                f"limits names {name!r}, which is not a stacked table; the stacks are "
                f"{sorted(known)}")
        if len(pair) != 2 or any(int(v) < 1 for v in pair):
            raise TensorFlowInputError(
                f"limits[{name!r}] is {pair!r}: expected (max_ids, max_unique_ids), both at "
                "least 1 (TensorFlow: 'max_ids_per_sparse_core must be > 0')")
    return _Options(local_devices, devices, cores, bool(allow_id_dropping),
                    bool(has_leading_dimension), max_ids_per_chip_per_sample,
                    {k: (int(a), int(b)) for k, (a, b) in chosen.items()})


def _read_features(stacking: Stacking, features: Mapping[str, Any],
                   weights: Mapping[str, Any] | None, opts: _Options) -> dict[str, _Feature]:
    names = [f.name for f in stacking.features]
    missing = [n for n in names if n not in features]
    extra = sorted((set(features) | set(weights or {})) - set(names))
    if missing or extra:
        raise TensorFlowInputError(
            f"the batch must hold exactly the stacking's features {names}: "
            f"missing {missing}, unknown {extra}")
    vocab = {t.name: t.vocabulary_size for s in stacking.stacks for t in s.tables}
    out = {}
    for slot in stacking.features:
        feature = _flatten(slot, features[slot.name], (weights or {}).get(slot.name),
                           slot.samples * opts.local_devices)
        _check_ids(slot, feature.values, vocab[slot.table])
        out[slot.name] = feature
    return out


def _flatten(slot: FeatureSlot, ids: Any, weights: Any, rows: int) -> _Feature:
    """Values, weights and row splits of one feature; ``rows`` samples expected in all."""
    if isinstance(ids, tuple):
        if len(ids) != 2:
            raise TensorFlowInputError(f"feature {slot.name!r}: a ragged feature is a pair "
                                       f"(values, row_splits), got {len(ids)} items")
        values, splits = _ints(slot, ids[0], "values"), _ints(slot, ids[1], "row_splits")
        if (values.ndim != 1 or splits.ndim != 1 or splits.size < 1 or splits[0] != 0
                or splits[-1] != values.size or np.any(np.diff(splits) < 0)):
            raise TensorFlowInputError(
                f"feature {slot.name!r}: row_splits must be 1-D, start at 0, never decrease and "
                f"end at len(values) ({values.size})")
        shape: tuple[int, ...] = values.shape
    else:
        dense = _ints(slot, ids, "ids")
        if dense.ndim != 2:
            raise TensorFlowInputError(f"feature {slot.name!r}: dense ids must be 2-D [batch, "
                                       f"ids per row], got shape {dense.shape}")
        shape = dense.shape
        values = dense.reshape(-1)
        k = dense.shape[1] if dense.shape[0] == rows else 1
        splits = np.arange(values.size // max(k, 1) + 1, dtype=np.int64) * k
    if splits.size - 1 != rows:
        raise TensorFlowInputError(
            f"feature {slot.name!r}: {splits.size - 1} rows, but its output shape gives "
            f"{slot.samples} samples per device x the local devices = {rows}; TensorFlow "
            f"refuses a batch whose rows differ from the sample count - feed {rows} rows")
    return _Feature(values, _weights(slot, weights, shape), splits)


def _ints(slot: FeatureSlot, value: Any, what: str) -> IntArray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TensorFlowInputError(
            f"feature {slot.name!r}: {what} must be integers, got dtype {array.dtype}; "
            "convert with .astype(np.int64) after checking the values are whole")
    return array.astype(np.int64)


def _weights(slot: FeatureSlot, weights: Any, shape: tuple[int, ...]) -> F32Array | None:
    if weights is None:
        return None
    if isinstance(weights, tuple):
        weights = weights[0]
    array = np.asarray(weights)
    if array.shape != shape or array.dtype.kind not in "fiu":
        raise TensorFlowInputError(
            f"feature {slot.name!r}: weights of shape {array.shape} and dtype {array.dtype}; "
            f"expected numbers of the ids' shape {shape} (TensorFlow: 'Values and weights "
            "should have same elements')")
    return array.astype(np.float32).reshape(-1)


def _check_ids(slot: FeatureSlot, values: IntArray, vocabulary: int) -> None:
    """TensorFlow casts ids to int32 and reads any value: refuse those that land elsewhere."""
    if values.size and (int(values.min()) < 0 or int(values.max()) >= vocabulary):
        bad = int(values.min()) if int(values.min()) < 0 else int(values.max())
        raise TensorFlowInputError(
            f"feature {slot.name!r} (table {slot.table!r}): id {bad} is outside 0 to "
            f"{vocabulary - 1}; TensorFlow maps it to another table's row or to padding "
            "without a check - remove or remap it before preprocessing")


# ---------------------------------------------------------------- step 1: one feature

@dataclass(frozen=True)
class _Coo:
    """A feature's COO entries on one device after step 1, in input order, and for every input
    id the entry it merged into."""

    core: IntArray
    sample: IntArray  # the stack's sample within the SparseCore's batch
    column: IntArray
    gain: F32Array
    entry_of_id: IntArray


def _row_scale(combiner: str, w: F32Array, row: IntArray, rows: int) -> F32Array:
    """Per row: 1 (sum), 1/sum(w) (mean), 1/sqrt(sum(w x w)) (sqrtn); 0 for a zero sum.

    Sums run left to right in float32 from 0, one rounding per term (``w x w`` rounded before it
    is added: TensorFlow computes it in a separate ``std::function``); the reciprocal is taken
    in double and rounded to float32, as ``1.0 / x`` in the C++.
    """
    if combiner == "sum":
        return np.ones(rows, np.float32)
    terms = w * w if combiner == "sqrtn" else w
    total = np.zeros(rows, np.float32)
    position = np.arange(row.size) - np.searchsorted(row, row)  # rows are ascending
    for j in range(int(position.max()) + 1 if position.size else 0):
        at = position == j
        total[row[at]] = total[row[at]] + terms[at]
    root = np.sqrt(total) if combiner == "sqrtn" else total
    with np.errstate(divide="ignore"):
        scale = np.where(root == 0, 0.0, 1.0 / root.astype(np.float64))
    return scale.astype(np.float32)


def _convert(slot: FeatureSlot, feature: _Feature, combiner: str, device: int,
             opts: _Options) -> _Coo:
    """``ConvertToListOfSparseCoreCooTensors`` on the device's slice of one feature."""
    b = slot.samples
    per_core = b // opts.sparse_cores
    lo, hi = feature.row_splits[device * b], feature.row_splits[(device + 1) * b]
    x = feature.values[lo:hi]
    w = (np.ones(x.size, np.float32) if feature.weights is None
         else feature.weights[lo:hi])
    row = np.repeat(np.arange(b, dtype=np.int64),
                    np.diff(feature.row_splits[device * b:(device + 1) * b + 1]))
    scale = _row_scale(combiner, w, row, b)
    # only adjacent repeats merge: a new entry wherever (row, id) changes from the previous id
    new = np.ones(x.size, bool)
    new[1:] = (row[1:] != row[:-1]) | (x[1:] != x[:-1])
    entry_of_id = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    merged = _ordered_sum(w, entry_of_id, starts)
    mask = opts.n - 1
    return _Coo(
        core=row[starts] // per_core,
        sample=row[starts] % per_core + slot.row_offset // opts.sparse_cores,
        column=((x[starts] + slot.col_shift) & mask) + (x[starts] & ~mask) + slot.col_offset,
        gain=merged * scale[row[starts]] if combiner != "sum" else merged,
        entry_of_id=entry_of_id)


def _ordered_sum(values: F32Array, group: IntArray, starts: IntArray) -> F32Array:
    """Per group (consecutive runs starting at ``starts``) the float32 sum of its values left to
    right, one rounding per term."""
    total = values[starts].copy()
    position = np.arange(values.size) - starts[group] if values.size else group
    for j in range(1, int(position.max()) + 1 if values.size else 0):
        at = position == j
        total[group[at]] = total[group[at]] + values[at]
    return total


# ---------------------------------------------------------------- steps 2-3: one stack

@dataclass
class _Core:
    """One SparseCore's entries after step 2, partition by partition, and where each of the
    step-1 entries it merged went: ``origin`` holds (feature index, step-1 entry, position)."""

    sample: IntArray
    token: IntArray
    gain: F32Array
    origin: list[tuple[IntArray, IntArray, IntArray]]
    kept: BoolArray | None = None  # after step 3: whether each entry fit the buffer


@dataclass
class _Device:
    """One device's result for a stack: counts per (SparseCore, partition) and the packing."""

    counts: IntArray  # [S, N] merged entries
    distinct: IntArray  # [S, N] distinct columns
    cores: list[_Core]
    start: IntArray | None = None  # [S, N] where each run starts in the buffer
    written: IntArray | None = None  # [S, N] entries of each run that fit
    row_pointers: IntArray | None = None  # [S x roundup8(N)]


def _preprocess_stack(stack: Stack, slots: Sequence[FeatureSlot],
                      inputs: Mapping[str, _Feature], opts: _Options) -> PreprocessedStack:
    if stack.combiner not in _COMBINERS:
        raise TensorFlowInputError(
            f"stacked table {stack.name!r}: combiner {stack.combiner!r}; TensorFlow accepts "
            f"only {', '.join(_COMBINERS)} ('Invalid combiner')")
    for slot in slots:
        if slot.samples % opts.sparse_cores:
            raise TensorFlowInputError(
                f"feature {slot.name!r}: {slot.samples} samples per chip do not divide by "
                f"{opts.sparse_cores} SparseCores ('sample_count ... is not divisible by the "
                "number of sparsecores per chip'); use a batch that is a multiple of "
                f"{opts.sparse_cores}")
    limits = opts.limits.get(
        stack.name, (stack.max_ids_per_partition, stack.max_unique_ids_per_partition))
    capacity = (opts.max_ids_per_chip_per_sample
                * (stack.total_sample_count // opts.sparse_cores) * opts.sparse_cores)
    if capacity % 8:
        raise TensorFlowInputError(
            f"stacked table {stack.name!r}: max_ids_per_chip = {capacity} is not a multiple of "
            "8 (TensorFlow's xla_pad_size); choose max_ids_per_chip_per_sample or the batch so "
            "that it is")
    devices = []
    dropped = {slot.name: np.zeros(inputs[slot.name].values.size, bool) for slot in slots}
    drops = 0
    for device in range(opts.local_devices):
        coos = [_convert(slot, inputs[slot.name], stack.combiner, device, opts)
                for slot in slots]
        result = _sort(slots, coos, opts)
        _check_limits(stack, result, limits, device, opts)
        drops += _pack(stack, result, capacity, opts)
        devices.append(result)
        _mark_dropped(slots, inputs, coos, result, device, dropped)
    return _assemble(stack, devices, capacity, drops, dropped, opts)


def _sort(slots: Sequence[FeatureSlot], coos: Sequence[_Coo], opts: _Options) -> _Device:
    """``SortListOfSparseCoreCooTensors`` for every SparseCore of the device (step 2): per
    table (features with one ``col_offset``, in ``col_offset`` order as its ``std::map``), sort
    by (column, position) and merge equal (sample, column) neighbours."""
    groups: dict[int, list[int]] = {}
    for f, slot in enumerate(slots):
        groups.setdefault(slot.col_offset, []).append(f)
    n = opts.n
    device = _Device(np.zeros((opts.sparse_cores, n), np.int64),
                     np.zeros((opts.sparse_cores, n), np.int64), [])
    for core in range(opts.sparse_cores):
        runs = [_sort_group(coos, groups[key], core) for key in sorted(groups)]
        device.cores.append(_lay_out(device, core, runs, n))
    return device


@dataclass(frozen=True)
class _Run:
    """One table's merged entries on one SparseCore, in (column, position) order, and for each
    step-1 entry (in the same sorted order) its feature, index and merged entry."""

    column: IntArray
    sample: IntArray
    gain: F32Array
    new_column: BoolArray
    feature: IntArray
    entry: IntArray
    merged_into: IntArray


def _sort_group(coos: Sequence[_Coo], members: list[int], core: int) -> _Run:
    picked = [(f, np.flatnonzero(coos[f].core == core)) for f in members]
    column = np.concatenate([coos[f].column[e] for f, e in picked])
    order = np.argsort(column, kind="stable")
    column = column[order]
    sample = np.concatenate([coos[f].sample[e] for f, e in picked])[order]
    gain = np.concatenate([coos[f].gain[e] for f, e in picked])[order]
    new_column = np.ones(column.size, bool)
    new_column[1:] = column[1:] != column[:-1]
    new_entry = new_column.copy()
    new_entry[1:] |= sample[1:] != sample[:-1]
    merged_into = np.cumsum(new_entry) - 1
    starts = np.flatnonzero(new_entry)
    return _Run(column[starts], sample[starts], _ordered_sum(gain, merged_into, starts),
                new_column[starts],
                np.concatenate([np.full(e.size, f) for f, e in picked])[order],
                np.concatenate([e for _, e in picked])[order], merged_into)


def _lay_out(device: _Device, core: int, runs: list[_Run], n: int) -> _Core:
    """Count one SparseCore's entries per partition and order them partition by partition
    (within a partition: tables in order, then columns, as TensorFlow writes them)."""
    mask, shift = n - 1, n.bit_length() - 1
    if not runs:
        empty = np.zeros(0, np.int64)
        return _Core(empty, empty, np.zeros(0, np.float32), [])
    column = np.concatenate([r.column for r in runs])
    partition = column & mask
    device.counts[core] = np.bincount(partition, minlength=n)
    new_column = np.concatenate([r.new_column for r in runs])
    device.distinct[core] = np.bincount(partition[new_column], minlength=n)
    order = np.argsort(partition, kind="stable")
    position = np.empty(column.size, np.int64)
    position[order] = np.arange(column.size)
    origin, offset = [], 0
    for r in runs:
        origin.append((r.feature, r.entry, position[r.merged_into + offset]))
        offset += r.column.size
    return _Core(sample=np.concatenate([r.sample for r in runs])[order],
                 token=column[order] >> shift,
                 gain=np.concatenate([r.gain for r in runs])[order], origin=origin)


def _check_limits(stack: Stack, device: _Device, limits: tuple[int, int], index: int,
                  opts: _Options) -> None:
    """TensorFlow's check: SparseCore by SparseCore, partition by partition, ids first."""
    for core in range(opts.sparse_cores):
        for partition in range(opts.n):
            for counts, limit, what in ((device.counts, limits[0], "ids"),
                                        (device.distinct, limits[1], "unique ids")):
                observed = int(counts[core, partition])
                if observed <= limit:
                    continue
                name = "max_ids" if what == "ids" else "max_unique_ids"
                raise TensorFlowLimitError(
                    f"stacked table {stack.name!r}: SparseCore {core} of local device {index} "
                    f"sends {observed} {what} to partition {partition}, more than {limit} "
                    f"({name}_per_table[{stack.name!r}]); TensorFlow 2.21 fails the step here "
                    f"('Sparse core {partition} gets {observed} {what} while the max {what} "
                    f"per sparse core is set to be {limit}'), with or without "
                    f"allow_id_dropping - raise {name}_per_table[{stack.name!r}] to at least "
                    f"{observed}", stack=stack.name, limit_name=f"{name}_per_partition",
                    observed=observed, limit=limit, where=(index, core, partition))


def _pack(stack: Stack, device: _Device, capacity: int, opts: _Options) -> int:
    """``ConvertToSparseCoreCsrWrappedCooTensor`` without minibatching (step 3); returns the
    entries that did not fit."""
    n, slots = opts.n, _round8(opts.n)
    start = np.zeros((opts.sparse_cores, n), np.int64)
    written = np.zeros((opts.sparse_cores, n), np.int64)
    pointers = np.zeros(opts.sparse_cores * slots, np.int64)
    total, packed, at = int(device.counts.sum()), 0, 0
    for core in range(opts.sparse_cores):
        for partition in range(n):
            count = int(device.counts[core, partition])
            start[core, partition] = at
            if at + count > capacity:
                if not opts.allow_id_dropping:
                    raise TensorFlowBufferError(
                        f"stacked table {stack.name!r}: the device's {total} entries do not "
                        f"fit max_ids_per_chip = {capacity} (max_ids_per_chip_per_sample "
                        f"{opts.max_ids_per_chip_per_sample} x {stack.total_sample_count} "
                        f"samples); TensorFlow fails the step ('The remaining id count is "
                        f"{total - packed}') - set allow_id_dropping=True or raise "
                        "max_ids_per_chip_per_sample")
                count = min(capacity - at, count)
                at = capacity
            else:
                at += count
            written[core, partition] = count
            packed += count
            pointers[core * slots + partition] = at
            at = _round8(at)
        pointers[core * slots + n:(core + 1) * slots] = at
    device.start, device.written, device.row_pointers = start, written, pointers
    for core, entries in enumerate(device.cores):
        rank = np.arange(entries.token.size) - np.repeat(
            np.cumsum(device.counts[core]) - device.counts[core], device.counts[core])
        entries.kept = rank < np.repeat(written[core], device.counts[core])
    return total - packed


def _mark_dropped(slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
                  coos: Sequence[_Coo], device: _Device, index: int,
                  dropped: dict[str, BoolArray]) -> None:
    """Every input id of the device: dropped when the entry it finally merged into was."""
    lost = [np.zeros(c.column.size, bool) for c in coos]
    for core in device.cores:
        assert core.kept is not None
        for feature, entry, position in core.origin:
            for f in np.unique(feature):
                at = feature == f
                lost[f][entry[at]] = ~core.kept[position[at]]
    for f, slot in enumerate(slots):
        splits = inputs[slot.name].row_splits
        lo, hi = splits[index * slot.samples], splits[(index + 1) * slot.samples]
        dropped[slot.name][lo:hi] = lost[f][coos[f].entry_of_id]


def _assemble(stack: Stack, devices: list[_Device], capacity: int, drops: int,
              dropped: dict[str, BoolArray], opts: _Options) -> PreprocessedStack:
    """The device arrays in the contract's shapes (docstring of :func:`preprocess_tensorflow`)."""
    count = len(devices)
    ids = np.zeros((count, capacity), np.int32)
    samples = np.zeros((count, capacity), np.int32)
    gains = np.zeros((count, capacity), np.float32)
    valid = np.zeros((count, capacity), bool)
    for d, device in enumerate(devices):
        assert device.start is not None and device.written is not None
        for core, entries in enumerate(device.cores):
            assert entries.kept is not None
            begin = np.repeat(device.start[core], device.written[core])
            where = begin + np.arange(begin.size) - np.repeat(
                np.cumsum(device.written[core]) - device.written[core], device.written[core])
            ids[d, where] = entries.token[entries.kept]
            samples[d, where] = entries.sample[entries.kept]
            gains[d, where] = entries.gain[entries.kept]
            valid[d, where] = True
            for end in device.start[core] + device.written[core]:
                pad = slice(int(end), int(_round8(end)))
                ids[d, pad], samples[d, pad], gains[d, pad] = PAD_VALUE, PAD_VALUE, PAD_VALUE
    shape = (count, -1) if opts.has_leading_dimension else (-1,)
    counts = np.stack([d.counts for d in devices])  # [L, S, N]
    distinct = np.stack([d.distinct for d in devices])
    pointers = np.stack([d.row_pointers for d in devices if d.row_pointers is not None])
    return PreprocessedStack(
        stack=stack.name,
        max_ids_per_partition=counts.max(axis=1).astype(np.int32),
        max_unique_ids_per_partition=distinct.max(axis=1).astype(np.int32),
        required_buffer_size_per_sc=_round8(counts).sum(axis=2).astype(np.int32),
        id_drop_count=drops, coo_buffer_size_per_device=capacity,
        row_pointers=pointers.astype(np.int32).reshape(shape), embedding_ids=ids.reshape(shape),
        sample_ids=samples.reshape(shape), gains=gains.reshape(shape),
        valid_mask=valid.reshape(shape), dropped=dropped)


def _round8(x: Any) -> Any:
    """``x`` rounded up to a multiple of 8 (TensorFlow's ``xla_pad_size``)."""
    return (x + 7) // 8 * 8

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

``enable_minibatching=True`` runs instead the minibatching ops of the same file, fed as
``TPUEmbeddingV2`` fed them before 2.21 (2.21 no longer calls them):
``GetMinibatchSplitsWithPhysicalReplica`` (the stack's features concatenated, SparseCore ``s``
taking the *stack's* samples ``[s b, (s+1) b)``; columns fall into 64 **buckets by column range**
of ``ceil(rows / 64)``; with ``allow_id_dropping``, **once a bucket's run holds ``max_ids``
entries or ``max_unique_ids`` columns every later id of that bucket is dropped**, even another
sample of a column already kept; without it a bucket over a limit fails; a binary tree of splits
is grown where sections exceed a limit and merged back greedily) and
``GetMinibatchesInCsrWithPhysicalReplica`` (the same packing, per SparseCore and minibatch).

The result is the contract's :class:`PreprocessedBatch`; where its fields differ from
jax-tpu-embedding's (``preprocess.py``), the field's note in :func:`preprocess_tensorflow` says
how. Inputs follow ``preprocess``: per feature a dense int array ``[batch, k]`` or a ragged pair
``(values, row_splits)`` covering the local devices' batches one after the other; weights the same
shape. docs/sparsecore/stacking-tensorflow.md explains each rule and decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.base.sparsecore_defaults import DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE
from tpuemb_cfg.sparsecore._args import check_int, check_preprocess
from tpuemb_cfg.sparsecore.preprocess_input import SparseCoreInputError, _Feature
from tpuemb_cfg.sparsecore.preprocess_input import _flatten as _flatten_input
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

# DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE (TensorFlow 2.21's ``SparseCoreEmbeddingConfig.
# max_ids_per_chip_per_sample``) is tpuemb_cfg.base.sparsecore_defaults', re-exported here.
#: ``kXlaPadValue``: what TensorFlow writes into the padding of the COO buffers.
PAD_VALUE = (1 << 31) - 1
_COMBINERS = ("sum", "mean", "sqrtn")

IntArray = npt.NDArray[np.int64]
F32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


class TensorFlowInputError(SparseCoreInputError):
    """A batch or option TensorFlow's preprocessing refuses (its ``InvalidArgumentError``), or
    one it would read wrongly without a check, with the value found and the fix (a
    :class:`SparseCoreInputError`, so one ``except`` serves both modes)."""

    def __init__(self, message: str, *, reason: str = "tensorflow",
                 stack: str | None = None) -> None:
        super().__init__(message, reason=reason, stack=stack)


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
    minibatching: bool = False

    @property
    def n(self) -> int:
        return self.global_devices * self.sparse_cores


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

    ``features``/``weights``: as :func:`tpuemb_cfg.sparsecore.preprocessing.preprocess`. Each local
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

    ``enable_minibatching=True``: the minibatching ops (module docstring); the row pointers are
    then ``roundup8(N)`` slots per (SparseCore, minibatch), the statistics count every bucket
    before dropping, ``id_drop_count`` adds the entries a bucket's limit dropped, and
    ``num_minibatches`` is the largest count of any stack (all local devices share their splits,
    as TensorFlow gathers them across replicas; tpuemb sees only this host's devices).
    """
    check_preprocess("preprocess_tensorflow", stacking, features, weights,
                     local_devices=local_devices, global_devices=global_devices,
                     sparse_cores_per_device=sparse_cores_per_device, limits=limits,
                     flags={"allow_id_dropping": allow_id_dropping,
                            "has_leading_dimension": has_leading_dimension,
                            "enable_minibatching": enable_minibatching})
    check_int("preprocess_tensorflow", "max_ids_per_chip_per_sample",
              max_ids_per_chip_per_sample)
    opts = replace(_options(stacking, local_devices, global_devices, sparse_cores_per_device,
                            allow_id_dropping, has_leading_dimension, limits,
                            max_ids_per_chip_per_sample), minibatching=bool(enable_minibatching))
    inputs = _read_features(stacking, features, weights, opts)
    stacks, minibatches = {}, 1
    for stack in stacking.stacks:
        stacks[stack.name], count = _preprocess_stack(
            stack, stacking.features_of(stack.name), inputs, opts)
        minibatches = max(minibatches, count)
    return PreprocessedBatch(stacks=stacks, num_minibatches=minibatches)


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
    """Values, weights and row splits of one feature (read as jax mode reads them);
    ``rows`` samples expected in all. A dense ``[n, k]`` array whose ``n`` is not ``rows`` is
    TensorFlow's dense input: one id per sample."""
    feature = _flatten_input(slot.name, ids, weights, error=TensorFlowInputError)
    if not isinstance(ids, tuple) and feature.rows != rows:
        feature = replace(feature, row_splits=np.arange(feature.values.size + 1, dtype=np.int64))
    if feature.rows != rows:
        raise TensorFlowInputError(
            f"feature {slot.name!r}: {feature.rows} rows, but its output shape gives "
            f"{slot.samples} samples per device x the local devices = {rows}; TensorFlow "
            f"refuses a batch whose rows differ from the sample count - feed {rows} rows")
    return feature


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

    row: IntArray  # the sample within the feature's slice of the device
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
        row=row[starts], core=row[starts] // per_core,
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
class _Layout:
    """One device's entries for a stack, ready to pack, and what packing made of them.

    ``sample``/``token``/``gain`` are the merged entries in *source order*; ``groups`` lists,
    per SparseCore (or per SparseCore and minibatch), one ``(source start, count)`` run per
    partition, in the order TensorFlow writes them; ``origin`` maps every step-1 entry (per
    feature) to its merged entry's source position, -1 when a limit dropped it. ``counts`` and
    ``distinct`` are ``[S, N]`` (after merging, before any drop), ``limit_drops`` the merged
    entries a limit dropped.
    """

    sample: IntArray
    token: IntArray
    gain: F32Array
    groups: list[list[tuple[int, int]]]
    origin: list[IntArray]
    counts: IntArray
    distinct: IntArray
    limit_drops: int = 0
    destination: list[list[tuple[int, int]]] | None = None  # per run: (start, written)
    row_pointers: IntArray | None = None
    kept: BoolArray | None = None  # per source entry: written to the buffer


def _preprocess_stack(stack: Stack, slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
                      opts: _Options) -> tuple[PreprocessedStack, int]:
    """The stack's result and its number of minibatches per SparseCore."""
    if stack.combiner not in _COMBINERS:
        raise TensorFlowInputError(
            f"stacked table {stack.name!r}: combiner {stack.combiner!r}; TensorFlow accepts "
            f"only {', '.join(_COMBINERS)} ('Invalid combiner')")
    for samples, what in [(slot.samples, f"feature {slot.name!r}") for slot in slots] + [
            (stack.total_sample_count, f"stacked table {stack.name!r}")]:
        if samples % opts.sparse_cores:
            raise TensorFlowInputError(
                f"{what}: {samples} samples per chip do not divide by {opts.sparse_cores} "
                "SparseCores ('sample_count ... is not divisible by the number of sparsecores "
                f"per chip'); use a batch that is a multiple of {opts.sparse_cores}")
    limits = opts.limits.get(
        stack.name, (stack.max_ids_per_partition, stack.max_unique_ids_per_partition))
    if min(limits) < 1:
        raise TensorFlowInputError(
            f"stacked table {stack.name!r}: limits (max_ids, max_unique_ids) = {limits}; "
            "TensorFlow needs both at least 1 ('max_ids_per_sparse_core must be > 0')")
    capacity = opts.max_ids_per_chip_per_sample * stack.total_sample_count
    if capacity % 8:
        raise TensorFlowInputError(
            f"stacked table {stack.name!r}: max_ids_per_chip = {capacity} is not a multiple of "
            "8 (TensorFlow's xla_pad_size); choose max_ids_per_chip_per_sample or the batch so "
            "that it is")
    coos = [[_convert(slot, inputs[slot.name], stack.combiner, device, opts) for slot in slots]
            for device in range(opts.local_devices)]
    if opts.minibatching:
        layouts, minibatches = _minibatch_layouts(stack, slots, coos, limits, opts)
    else:
        layouts, minibatches = [_sort(stack, slots, c, limits, d, opts)
                                for d, c in enumerate(coos)], 1
    dropped = {slot.name: np.zeros(inputs[slot.name].values.size, bool) for slot in slots}
    for device, layout in enumerate(layouts):
        _pack(stack, layout, capacity, opts)
        _mark_dropped(slots, inputs, coos[device], layout, device, dropped)
    return _assemble(stack, layouts, capacity, dropped, opts), minibatches


def _sort(stack: Stack, slots: Sequence[FeatureSlot], coos: Sequence[_Coo],
          limits: tuple[int, int], device: int, opts: _Options) -> _Layout:
    """``SortListOfSparseCoreCooTensors`` for every SparseCore of the device (step 2): per
    table (features with one ``col_offset``, in ``col_offset`` order as its ``std::map``), sort
    by (column, position) and merge equal (sample, column) neighbours; count per partition;
    lay the entries out partition by partition."""
    groups: dict[int, list[int]] = {}
    for f, slot in enumerate(slots):
        groups.setdefault(slot.col_offset, []).append(f)
    n, mask, shift = opts.n, opts.n - 1, opts.n.bit_length() - 1
    counts = np.zeros((opts.sparse_cores, n), np.int64)
    distinct = np.zeros((opts.sparse_cores, n), np.int64)
    origin = [np.full(c.column.size, -1, np.int64) for c in coos]
    parts: list[tuple[IntArray, IntArray, F32Array]] = []
    runs: list[list[tuple[int, int]]] = []
    base = 0
    for core in range(opts.sparse_cores):
        merged = [_sort_group(coos, groups[key], core) for key in sorted(groups)]
        column = np.concatenate([m.column for m in merged] or [np.zeros(0, np.int64)])
        partition = column & mask
        counts[core] = np.bincount(partition, minlength=n)
        new_column = np.concatenate([m.new_column for m in merged] or [np.zeros(0, bool)])
        distinct[core] = np.bincount(partition[new_column], minlength=n)
        order = np.argsort(partition, kind="stable")
        position = np.empty(column.size, np.int64)
        position[order] = np.arange(column.size) + base
        offset = 0
        for m in merged:
            for f in np.unique(m.feature):
                at = m.feature == f
                origin[f][m.entry[at]] = position[m.merged_into[at] + offset]
            offset += m.column.size
        parts.append((np.concatenate([m.sample for m in merged] or [column])[order],
                      column[order] >> shift,
                      np.concatenate([m.gain for m in merged] or [np.zeros(0, np.float32)])[order]))
        starts = base + np.cumsum(counts[core]) - counts[core]
        runs.append([(int(a), int(c)) for a, c in zip(starts, counts[core], strict=True)])
        base += column.size
    _check_limits(stack, counts, distinct, limits, device, opts)
    return _Layout(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                   np.concatenate([p[2] for p in parts]), runs, origin, counts, distinct)


@dataclass(frozen=True)
class _Merged:
    """One table's merged entries on one SparseCore, in (column, position) order, and for each
    step-1 entry (in the same sorted order) its feature, index and merged entry."""

    column: IntArray
    sample: IntArray
    gain: F32Array
    new_column: BoolArray
    feature: IntArray
    entry: IntArray
    merged_into: IntArray


def _sort_group(coos: Sequence[_Coo], members: list[int], core: int) -> _Merged:
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
    return _Merged(column[starts], sample[starts], _ordered_sum(gain, merged_into, starts),
                   new_column[starts],
                   np.concatenate([np.full(e.size, f) for f, e in picked])[order],
                   np.concatenate([e for _, e in picked])[order], merged_into)


def _check_limits(stack: Stack, counts: IntArray, distinct: IntArray, limits: tuple[int, int],
                  device: int, opts: _Options) -> None:
    """TensorFlow's check: SparseCore by SparseCore, partition by partition, ids first."""
    for core in range(opts.sparse_cores):
        for partition in range(opts.n):
            for table, limit, what in ((counts, limits[0], "ids"),
                                       (distinct, limits[1], "unique ids")):
                observed = int(table[core, partition])
                if observed <= limit:
                    continue
                name = "max_ids" if what == "ids" else "max_unique_ids"
                raise TensorFlowLimitError(
                    f"stacked table {stack.name!r}: SparseCore {core} of local device {device} "
                    f"sends {observed} {what} to partition {partition}, more than {limit} "
                    f"({name}_per_table[{stack.name!r}]); TensorFlow 2.21 fails the step here "
                    f"('Sparse core {partition} gets {observed} {what} while the max {what} "
                    f"per sparse core is set to be {limit}'), with or without "
                    f"allow_id_dropping - raise {name}_per_table[{stack.name!r}] to at least "
                    f"{observed}", stack=stack.name, limit_name=f"{name}_per_partition",
                    observed=observed, limit=limit, where=(device, core, partition))


def _pack(stack: Stack, layout: _Layout, capacity: int, opts: _Options) -> None:
    """Write the runs into the device's buffer of ``capacity`` entries (step 3): each run after
    the previous one, padded to a multiple of 8; a run that does not fit is cut (with
    ``allow_id_dropping``) or fails the step; ``roundup8(N)`` row-pointer slots per group (run
    ends, then the padded end repeated)."""
    total = sum(count for group in layout.groups for _, count in group)
    slots = _round8(opts.n)
    pointers = np.zeros(len(layout.groups) * slots, np.int64)
    kept = np.zeros(layout.token.size, bool)
    destination: list[list[tuple[int, int]]] = []
    packed, at = 0, 0
    for g, group in enumerate(layout.groups):
        placed = []
        for p, (source, count) in enumerate(group):
            begin = at
            if at + count > capacity:
                if not opts.allow_id_dropping:
                    raise TensorFlowBufferError(
                        f"stacked table {stack.name!r}: the device's {total} entries do not fit "
                        f"max_ids_per_chip = {capacity} (max_ids_per_chip_per_sample "
                        f"{opts.max_ids_per_chip_per_sample} x {stack.total_sample_count} "
                        f"samples); TensorFlow fails the step ('The remaining id count is "
                        f"{total - packed}') - set allow_id_dropping=True or raise "
                        "max_ids_per_chip_per_sample")
                count = min(capacity - at, count)
                at = capacity
            else:
                at += count
            kept[source:source + count] = True
            placed.append((begin, count))
            packed += count
            pointers[g * slots + p] = at
            at = _round8(at)
        pointers[g * slots + len(group):(g + 1) * slots] = at
        destination.append(placed)
    layout.destination, layout.row_pointers, layout.kept = destination, pointers, kept
    layout.limit_drops += total - packed


def _mark_dropped(slots: Sequence[FeatureSlot], inputs: Mapping[str, _Feature],
                  coos: Sequence[_Coo], layout: _Layout, device: int,
                  dropped: dict[str, BoolArray]) -> None:
    """Every input id of the device: dropped when the entry it finally merged into was."""
    assert layout.kept is not None
    for f, slot in enumerate(slots):
        where = layout.origin[f]
        lost = (where < 0) | ~layout.kept[np.maximum(where, 0)]
        splits = inputs[slot.name].row_splits
        lo, hi = splits[device * slot.samples], splits[(device + 1) * slot.samples]
        dropped[slot.name][lo:hi] = lost[coos[f].entry_of_id]


def _assemble(stack: Stack, layouts: list[_Layout], capacity: int,
              dropped: dict[str, BoolArray], opts: _Options) -> PreprocessedStack:
    """The device arrays in the contract's shapes (docstring of :func:`preprocess_tensorflow`)."""
    count = len(layouts)
    ids = np.zeros((count, capacity), np.int32)
    samples = np.zeros((count, capacity), np.int32)
    gains = np.zeros((count, capacity), np.float32)
    valid = np.zeros((count, capacity), bool)
    room = np.zeros((count, opts.sparse_cores), np.int64)
    per_core = len(layouts[0].groups) // opts.sparse_cores if layouts else 1
    for d, layout in enumerate(layouts):
        assert layout.destination is not None
        for g, (group, placed) in enumerate(zip(layout.groups, layout.destination, strict=True)):
            for (source, wanted), (begin, written) in zip(group, placed, strict=True):
                room[d, g // per_core] += _round8(wanted)
                span = slice(begin, begin + written)
                ids[d, span] = layout.token[source:source + written]
                samples[d, span] = layout.sample[source:source + written]
                gains[d, span] = layout.gain[source:source + written]
                valid[d, span] = True
                pad = slice(begin + written, _round8(begin + written))
                ids[d, pad], samples[d, pad], gains[d, pad] = PAD_VALUE, PAD_VALUE, PAD_VALUE
    shape = (count, -1) if opts.has_leading_dimension else (-1,)
    counts = np.stack([layout.counts for layout in layouts])  # [L, S, N]
    distinct = np.stack([layout.distinct for layout in layouts])
    pointers = np.stack([layout.row_pointers for layout in layouts
                         if layout.row_pointers is not None])
    return PreprocessedStack(
        stack=stack.name,
        max_ids_per_partition=counts.max(axis=1).astype(np.int32),
        max_unique_ids_per_partition=distinct.max(axis=1).astype(np.int32),
        required_buffer_size_per_sc=room.astype(np.int32),
        id_drop_count=sum(layout.limit_drops for layout in layouts),
        coo_buffer_size_per_device=capacity,
        row_pointers=pointers.astype(np.int32).reshape(shape), embedding_ids=ids.reshape(shape),
        sample_ids=samples.reshape(shape), gains=gains.reshape(shape),
        valid_mask=valid.reshape(shape), dropped=dropped)


def _round8(x: Any) -> Any:
    """``x`` rounded up to a multiple of 8 (TensorFlow's ``xla_pad_size``)."""
    return (x + 7) // 8 * 8


# ---------------------------------------------------------------- minibatching

#: ``tf_xla_sparse_core_minibatch_max_division_level``'s default: columns fall into 2^6 buckets.
MAX_DIVISION_LEVEL = 6
_DIVISIONS = 1 << MAX_DIVISION_LEVEL


@dataclass(frozen=True)
class _Split:
    """``GetMinibatchSplitsWithPhysicalReplica`` on one device: the kept merged entries sorted
    by run (SparseCore, partition, bucket), the kept count of each run, the step-1 entries'
    positions among them (-1: dropped), the statistics and the binary splits."""

    sample: IntArray
    token: IntArray
    gain: F32Array
    kept_per_run: IntArray  # [S x N x 64]
    origin: list[IntArray]
    counts: IntArray
    distinct: IntArray
    limit_drops: int
    splits: int


def _minibatch_layouts(stack: Stack, slots: Sequence[FeatureSlot],
                       coos: Sequence[Sequence[_Coo]], limits: tuple[int, int],
                       opts: _Options) -> tuple[list[_Layout], int]:
    """The minibatching ops on every local device; the splits of all of them are combined (OR)
    as TensorFlow gathers them across replicas, so every device gets the same minibatches."""
    found = [_split(stack, slots, c, limits, d, opts) for d, c in enumerate(coos)]
    combined = 0
    for split in found:
        combined |= split.splits
    buckets = [0, *_bucket_splits(combined), _DIVISIONS]
    n, layouts = opts.n, []
    for split in found:
        starts = np.concatenate(([0], np.cumsum(split.kept_per_run)))
        groups = []
        for core in range(opts.sparse_cores):
            for lo, hi in zip(buckets[:-1], buckets[1:], strict=True):
                runs = []
                for partition in range(n):
                    base = (core * n + partition) * _DIVISIONS
                    runs.append((int(starts[base + lo]),
                                 int(starts[base + hi] - starts[base + lo])))
                groups.append(runs)
        layouts.append(_Layout(split.sample, split.token, split.gain, groups, split.origin,
                               split.counts, split.distinct, split.limit_drops))
    return layouts, len(buckets) - 1


def _split(stack: Stack, slots: Sequence[FeatureSlot], coos: Sequence[_Coo],
           limits: tuple[int, int], device: int, opts: _Options) -> _Split:
    """``GetMinibatchSplitsWithPhysicalReplica`` as TensorFlow fed it before 2.21: the stack's
    features concatenated (samples offset by ``row_offset``), SparseCore s taking the stack's
    samples ``[s b, (s + 1) b)``; per SparseCore sorted by (column, position), equal
    (sample, column) neighbours merged; each merged entry counted in its run (partition,
    bucket = column div ceil(rows / 64)); with ``allow_id_dropping`` an entry is dropped once its
    run has ``max_ids`` entries or ``max_unique_ids`` columns, and stays so for the rest of the
    run."""
    n, cores = opts.n, opts.sparse_cores
    per_core = stack.total_sample_count // cores
    row = np.concatenate([c.row + slot.row_offset for c, slot in zip(coos, slots, strict=True)])
    column = np.concatenate([c.column for c in coos])
    core = row // per_core
    order = np.lexsort((column, core))  # stable: (SparseCore, column, position)
    row, column, core = row[order], column[order], core[order]
    new_column = np.ones(order.size, bool)
    new_column[1:] = (core[1:] != core[:-1]) | (column[1:] != column[:-1])
    new_entry = new_column.copy()
    new_entry[1:] |= row[1:] != row[:-1]
    merged_into = np.cumsum(new_entry) - 1
    starts = np.flatnonzero(new_entry)
    gain = _ordered_sum(np.concatenate([c.gain for c in coos])[order], merged_into, starts)
    row, column, core, new_column = row[starts], column[starts], core[starts], new_column[starts]
    division = max(1, -(-stack.padded_vocabulary_size // _DIVISIONS))
    run = (core * n + column % n) * _DIVISIONS + np.minimum(column // division, _DIVISIONS - 1)
    runs = cores * n * _DIVISIONS
    by_run = np.argsort(run, kind="stable")
    keep = np.ones(run.size, bool)
    if opts.allow_id_dropping:
        ranked = run[by_run]
        first = np.searchsorted(ranked, ranked)
        rank = np.arange(ranked.size) - first
        seen = np.cumsum(new_column[by_run]) - new_column[by_run]
        keep[by_run] = (rank < limits[0]) & (seen - seen[first] < limits[1])
    kept = np.bincount(run[keep], minlength=runs)
    kept_unique = np.bincount(run[keep & new_column], minlength=runs)
    _check_buckets(stack, kept, kept_unique, limits, opts)
    position = np.full(run.size, -1, np.int64)
    written = by_run[keep[by_run]]
    position[written] = np.arange(written.size)
    origin = []
    feature = np.concatenate([np.full(c.column.size, f) for f, c in enumerate(coos)])[order]
    entry = np.concatenate([np.arange(c.column.size) for c in coos])[order]
    for f, c in enumerate(coos):
        mine = np.full(c.column.size, -1, np.int64)
        at = feature == f
        mine[entry[at]] = position[merged_into[at]]
        origin.append(mine)
    shape = (cores, n, _DIVISIONS)
    return _Split(
        sample=row[written] % per_core, token=column[written] // n, gain=gain[written],
        kept_per_run=kept, origin=origin,
        counts=np.bincount(run, minlength=runs).reshape(shape).sum(axis=2),
        distinct=np.bincount(run[new_column], minlength=runs).reshape(shape).sum(axis=2),
        limit_drops=int((~keep).sum()),
        splits=_splits(kept.reshape(shape), kept_unique.reshape(shape), limits))


def _check_buckets(stack: Stack, kept: IntArray, unique: IntArray, limits: tuple[int, int],
                   opts: _Options) -> None:
    """TensorFlow fails when one bucket (1/64 of the columns) alone exceeds a limit."""
    over = np.flatnonzero((kept > limits[0]) | (unique > limits[1]))
    if over.size:
        run = int(over[0])
        core, rest = divmod(run, opts.n * _DIVISIONS)
        partition, bucket = divmod(rest, _DIVISIONS)
        raise TensorFlowLimitError(
            f"stacked table {stack.name!r}: SparseCore {core} sends {int(kept[run])} ids "
            f"({int(unique[run])} distinct) of column bucket {bucket} to partition "
            f"{partition}, more than max_ids {limits[0]} / max_unique_ids {limits[1]}; "
            "minibatching cannot split a bucket, so TensorFlow fails the step ('has too many "
            "ids for replica ... Consider making the max_division_level higher') - set "
            "allow_id_dropping=True or raise the stack's limits",
            stack=stack.name, limit_name="max_ids_per_partition", observed=int(kept[run]),
            limit=limits[0], where=(0, core, partition))


def _splits(kept: IntArray, unique: IntArray, limits: tuple[int, int]) -> int:
    """The binary splits of ``GetMinibatchSplitsWithPhysicalReplica``: per (SparseCore,
    partition), a binary tree over the 64 buckets is split where a section's ids or distinct
    ids exceed the limits (the tree is shared: splits found for earlier partitions are kept),
    then neighbouring buckets are merged back greedily while they fit."""
    pre = after = 0
    for counts, uniques in zip(kept.reshape(-1, _DIVISIONS), unique.reshape(-1, _DIVISIONS),
                               strict=True):
        ids = np.concatenate(([0], np.cumsum(counts)))
        distinct = np.concatenate(([0], np.cumsum(uniques)))
        for level in range(MAX_DIVISION_LEVEL):
            previous = (1 << (level - 1)) - 1 if level else 0
            if level and pre >> previous == 0:
                continue
            size = 1 << (MAX_DIVISION_LEVEL - level)
            for section in range(1 << level):
                if level and not pre & (1 << (previous + (section >> 1))):
                    continue
                lo, hi = section * size, (section + 1) * size
                if ids[hi] - ids[lo] > limits[0] or distinct[hi] - distinct[lo] > limits[1]:
                    pre |= 1 << ((1 << level) - 1 + section)
        bounds = [0, *_bucket_splits(pre), _DIVISIONS]
        merged, start = [], 0
        for i in range(1, len(bounds)):
            if (distinct[bounds[i]] - distinct[bounds[start]] <= limits[1]
                    and ids[bounds[i]] - ids[bounds[start]] <= limits[0]):
                continue
            merged.append(bounds[i - 1])
            start = i - 1
        after |= _binary_splits(merged)
    return after


def _bucket_splits(binary: int) -> list[int]:
    """``ConvertBinarySplitsToBucketSplits``: bit ``i`` (level ``l = bit_width(i + 1) - 1``,
    section ``i - 2^l + 1``) splits at bucket ``size + section x 2 size``, ``size = 2^(5 - l)``."""
    out = []
    index = 0
    while binary > 0:
        if binary & 1:
            level = (index + 1).bit_length() - 1
            size = 1 << (MAX_DIVISION_LEVEL - 1 - level)
            out.append(size + (index - (1 << level) + 1) * size * 2)
        binary >>= 1
        index += 1
    return sorted(out)


def _binary_splits(buckets: list[int]) -> int:
    """``ConvertBucketSplitsToBinarySplits``, the inverse of :func:`_bucket_splits`."""
    binary = 0
    for bucket in buckets:
        level = MAX_DIVISION_LEVEL - 1
        while bucket > 0 and bucket % 2 == 0:
            level -= 1
            bucket >>= 1
        binary |= 1 << ((1 << level) - 1 + bucket // 2)
    return binary

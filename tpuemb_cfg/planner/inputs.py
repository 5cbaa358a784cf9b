"""Samples of real ids for ``tpuemb plan``: recorded batches, Parquet or TFRecord files, read as a
stream of batches of the configured size, in memory independent of the sample's length.

A **batch** is one step's ids, keyed by feature name: ``{name: FeatureBatch(values, row_splits,
weights)}`` with int64 ``values`` (the ids), int64 ``row_splits`` (bag ``b`` holds
``values[row_splits[b]:row_splits[b + 1]]``) and float32 ``weights`` or ``None`` (1.0).
Feature names are the replay contract's ``"f0"``, ``"f1"``, ... for a ``TPUEmbeddingConfiguration``
(feature index ``f`` counts ``feature_descriptor`` entries, or each table's ``num_features``
features in legacy style) and the spec's feature names for a SparseCore configuration.

Formats (chosen by extension, :data:`FORMATS`):

- **replay ``B.npz``** (``.npz``): the replay contract's ``s{s}/f{f}/ids``, ``row_splits`` and
  ``weights``; ``grad`` and ``learning_rates`` are allowed and never decompressed. The keys and
  every member's header are checked when the file is opened (``npzio.NpzMembers``,
  ``executor.replay.parse_steps``: unexpected keys, gaps, a step that skips a feature), then one
  step is read at a time. For a SparseCore configuration ``f{i}`` is the spec's ``i``-th feature.
- **Parquet** (``.parquet``, ``.pq``; pyarrow, the optional extra ``[plan]``): one column per
  configured feature, named as the feature, of type ``list<integer>`` (a bag per row) or
  ``integer`` (one id per row); a null is an empty bag. Read a record batch at a time.
- **TFRecord** (``.tfrecord``, ``.tfrecords``, ``.tfr``) of ``tf.train.Example``: one
  ``int64_list`` feature per configured feature (absent from a record: an error; empty: an
  empty bag). The framing (little-endian uint64 length, masked CRC32C of the length, the data,
  masked CRC32C of the data) is read here and both CRCs are verified (:func:`crc32c`);
  messages are decoded with tpuemb's own copy of ``example.proto`` (no TensorFlow).

**Extra columns** (a Parquet column or TFRecord feature named as no configured feature, a
``B.npz`` feature index past the configured ones) are not read and are listed in
``SampleStats.ignored``. **Bounds**: a ``B.npz`` step's arrays are held against a share of the
memory (:func:`_read_limit`) from their ``.npy`` headers, and so is each Parquet row group's
configured columns from the file's metadata, when the files are opened.

Parquet and TFRecord hold **rows** (examples): each row gives one bag to every feature.
Weights are read from ``B.npz`` only (memory, load and limits do not depend on them).

**Rescaling.** The configured batch of a feature is ``bags = num_tensor_cores x
prod(input_shape)`` (legacy: the executor's ``Plan``) or ``samples x chips`` for a TensorFlow /
keras-rs SparseCore feature (``output_shape`` is per replica) and ``samples`` for a
jax-tpu-embedding one (``output_shape`` is the global batch). The sample's bags of each feature
are laid end to end in the order read (files in the order given, steps or rows in file order)
and cut into consecutive runs of the configured size: sample batches larger than the configured
one are split, smaller ones merged; bags left over at the end (fewer than one configured batch
of some feature) are not used and counted (:class:`SampleStats`). Recorded batches of exactly
the configured size pass through unchanged (``rescaled`` False).

Every bad input raises :class:`SampleError` (an ``InputError``: exit status 2 from the CLI)
naming the file, the key, column or record, the value found and what was expected.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats.limits import default_memory_limit
from tpuemb_cfg.formats.npzio import NpzMembers, check_total

from ..executor.replay import feature_of, parse_steps
from .parquet import bad_column, row_group_bytes, row_group_place
from .tfrecord import compression, crc32c, crc32c_many, mask, masked_crc32c, write_tfrecord

if TYPE_CHECKING:
    from ..executor.plan import Plan
    from ..sparsecore.config import SparseCoreConfig

__all__ = [
    "FORMATS", "FeatureBatch", "Sample", "SampleError", "SampleFeature", "SampleSchema",
    "SampleStats", "crc32c", "legacy_schema", "masked_crc32c", "open_sample",
    "sample_files", "sparsecore_schema", "write_tfrecord",
]

#: Extension -> format name.
FORMATS: dict[str, str] = {
    ".npz": "npz", ".parquet": "parquet", ".pq": "parquet",
    ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}
#: Rows a Parquet record batch or a TFRecord window holds at most (bounded memory).
ROWS_PER_READ = 8192
_PLAN_EXTRA = "pip install 'tpuemb[plan]'"


class FeatureBatch(NamedTuple):
    """One feature's bags: int64 ids, int64 row splits, float32 weights or None (1.0)."""

    values: np.ndarray
    row_splits: np.ndarray
    weights: np.ndarray | None = None

    @property
    def bags(self) -> int:
        return int(self.row_splits.shape[0] - 1)


@dataclass(frozen=True)
class SampleFeature:
    """A configured feature: its name in the sample, its table, the table's vocabulary (ids
    must be in ``[0, vocabulary)``), the bags of one configured (global) batch and, when the
    configuration says, the ids one bag holds (``ids_per_bag``: a spec's input shape, as
    MLPerf's multi-hot lengths; not checked against the sample, which may hold ragged bags)."""

    name: str
    table: str
    vocabulary: int
    bags: int
    ids_per_bag: int | None = None


@dataclass(frozen=True)
class SampleSchema:
    """The features a sample must give, in configuration order."""

    features: tuple[SampleFeature, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)


def legacy_schema(plan: Plan) -> SampleSchema:
    """The replay contract's features ``f0``, ``f1``, ... of an executor plan."""
    return SampleSchema(tuple(
        SampleFeature(f"f{f.index}", plan.tables[f.table].name, plan.tables[f.table].vocabulary,
                      plan.num_cores * int(np.prod(f.input_shape)), f.ids_per_bag)
        for f in plan.features))


def sparsecore_schema(config: SparseCoreConfig) -> SampleSchema:
    """The spec's features; a batch is the global batch (see the module's rescaling rule)."""
    vocab = {t.name: t.vocabulary_size for t in config.tables}
    per_replica = config.mode != "jax"  # jax (and keras-rs on JAX): global shapes
    return SampleSchema(tuple(
        SampleFeature(f.name, f.table, vocab[f.table],
                      f.samples * (config.topology.num_partitions if per_replica else 1),
                      f.ids_per_bag)
        for f in config.features))


class SampleError(InputError):
    """Bad sample input: ``where`` names the key, column or record inside ``path``."""

    def __init__(self, message: str, *, path: str, where: str | None = None) -> None:
        super().__init__(message, path=path)
        self.where = where

    def location(self) -> str:
        path = self.path if self.path is not None else "<input>"
        return path if self.where is None else f"{path}: {self.where}"


@dataclass
class SampleStats:
    """What was read: per feature the sample's bags and ids, the configured batches made, and
    the bags left over at the end (not used)."""

    format: str
    files: tuple[str, ...]
    #: distinct bag counts of the sample's own batches per feature (``B.npz``; rows: empty)
    sample_batch_bags: dict[str, set[int]] = field(default_factory=dict)
    bags_read: dict[str, int] = field(default_factory=dict)
    ids_read: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    leftover_bags: dict[str, int] = field(default_factory=dict)
    rescaled: bool = False
    #: the sample's columns (Parquet), features (TFRecord) or feature indexes (``B.npz``: the
    #: keys ``s{s}/f{i}/...`` past the configured features) that are no configured feature:
    #: not read, listed once in the report
    ignored: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "files": list(self.files),
            "sample_batch_bags": {k: sorted(v) for k, v in self.sample_batch_bags.items()},
            "bags_read": dict(self.bags_read), "ids_read": dict(self.ids_read),
            "batches": self.batches, "leftover_bags": dict(self.leftover_bags),
            "rescaled": self.rescaled, "ignored": sorted(self.ignored),
        }


# --- checks shared by every format --------------------------------------------------------------

def _check(feature: SampleFeature, values: Any, row_splits: Any, weights: Any, *, path: str,
           where: str, at: Callable[[int], tuple[str, str]] | None = None) -> FeatureBatch:
    """One feature's arrays as a trusted ``FeatureBatch``: integer 1-D ids in the table, row
    splits from 0 to nnz and non-decreasing, finite float32 weights, one per id. ``at(i)``:
    the (where, position) of the bag holding id ``i`` (rows and records; default: ``where``
    and "index i")."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" and not (values.size == 0 and values.dtype.kind == "f"):
        raise SampleError(f"ids of dtype {values.dtype} found, expected integers (int64)",
                          path=path, where=where)
    if values.ndim != 1:
        raise SampleError(f"ids of shape {values.shape} found, expected a 1-D array",
                          path=path, where=where)
    if values.size:
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= feature.vocabulary:
            bad = low if low < 0 else high
            index = int(np.flatnonzero(values == bad)[0])
            place, position = (where, f"index {index}") if at is None else at(index)
            raise SampleError(
                f"id {bad} at {position} of feature {feature.name!r} is outside table "
                f"{feature.table!r}: ids must be in [0, {feature.vocabulary})",
                path=path, where=place)
    ids = values.astype(np.int64, copy=False)
    nnz = ids.shape[0]
    if row_splits is None:
        splits = np.arange(nnz + 1, dtype=np.int64)
    else:
        splits = np.asarray(row_splits)
        if splits.dtype.kind not in "iu" or splits.ndim != 1:
            raise SampleError(f"row_splits of dtype {splits.dtype}, shape {splits.shape} found, "
                              "expected a 1-D integer array", path=path, where=where)
        splits = splits.astype(np.int64, copy=False)
        if splits.shape[0] < 1 or splits[0] != 0 or splits[-1] != nnz:
            raise SampleError(
                f"row_splits must start at 0 and end at the number of ids ({nnz}); found "
                f"{splits[:1].tolist()} ... {splits[-1:].tolist()} (length {splits.shape[0]})",
                path=path, where=where)
        steps = np.diff(splits)
        if (steps < 0).any():
            i = int(np.flatnonzero(steps < 0)[0]) + 1
            raise SampleError(f"row_splits must be non-decreasing; index {i} holds "
                              f"{int(splits[i])} after {int(splits[i - 1])}",
                              path=path, where=where)
    checked = None
    if weights is not None:
        checked = np.asarray(weights)
        if checked.dtype != np.float32 or checked.shape != (nnz,):
            raise SampleError(f"weights of dtype {checked.dtype}, shape {checked.shape} found, "
                              f"expected float32 ({nnz},): one weight per id",
                              path=path, where=where)
        bad = ~np.isfinite(checked)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SampleError(f"weights must be finite; found {checked[i]} at index {i}",
                              path=path, where=where)
    return FeatureBatch(ids, splits, checked)


# --- rescaling ----------------------------------------------------------------------------------

class _Bags:
    """A queue of one feature's bags, taken in runs of a fixed count."""

    def __init__(self) -> None:
        self.chunks: deque[FeatureBatch] = deque()
        self.start = 0  # bags of chunks[0] already taken
        self.count = 0

    def push(self, batch: FeatureBatch) -> None:
        if batch.bags:
            self.chunks.append(batch)
            self.count += batch.bags

    def take(self, n: int) -> FeatureBatch:
        parts: list[FeatureBatch] = []
        while n > 0:
            chunk = self.chunks[0]
            k = min(n, chunk.bags - self.start)
            parts.append(_slice(chunk, self.start, self.start + k))
            self.start += k
            n -= k
            self.count -= k
            if self.start == chunk.bags:
                self.chunks.popleft()
                self.start = 0
        return parts[0] if len(parts) == 1 else _concat(parts)


def _slice(batch: FeatureBatch, a: int, b: int) -> FeatureBatch:
    if a == 0 and b == batch.bags:
        return batch
    lo, hi = int(batch.row_splits[a]), int(batch.row_splits[b])
    return FeatureBatch(batch.values[lo:hi], batch.row_splits[a:b + 1] - lo,
                        None if batch.weights is None else batch.weights[lo:hi])


def _concat(parts: Sequence[FeatureBatch]) -> FeatureBatch:
    values = np.concatenate([p.values for p in parts])
    splits = [np.zeros(1, dtype=np.int64)]
    offset = 0
    for p in parts:
        splits.append(p.row_splits[1:] + offset)
        offset += int(p.row_splits[-1])
    weights = None
    if any(p.weights is not None for p in parts):
        weights = np.concatenate([p.weights if p.weights is not None
                                  else np.ones(p.values.shape[0], np.float32) for p in parts])
    return FeatureBatch(values, np.concatenate(splits), weights)


def _rescale(chunks: Iterable[dict[str, FeatureBatch]], schema: SampleSchema,
             stats: SampleStats) -> Iterator[dict[str, FeatureBatch]]:
    """Configured-size batches from the sample's chunks (the module's rescaling rule)."""
    queues = {f.name: _Bags() for f in schema.features}
    for chunk in chunks:
        for f in schema.features:
            batch = chunk[f.name]
            queues[f.name].push(batch)
            stats.bags_read[f.name] = stats.bags_read.get(f.name, 0) + batch.bags
            stats.ids_read[f.name] = stats.ids_read.get(f.name, 0) + int(batch.values.shape[0])
        while all(queues[f.name].count >= f.bags for f in schema.features):
            stats.batches += 1
            yield {f.name: queues[f.name].take(f.bags) for f in schema.features}
    stats.leftover_bags = {name: q.count for name, q in queues.items()}


# --- the sample ---------------------------------------------------------------------------------

class Sample:
    """A sample of ids opened against a schema: iterate it for configured-size batches.

    ``progress_total`` and ``progress_unit`` say how far the iteration goes (steps of a
    ``B.npz``, rows of Parquet files, bytes of TFRecord files) and ``on_progress(n)``, when
    set, is called with each increment as the files are read. ``stats`` fills as it runs.
    Iterating twice reads the files again.
    """

    def __init__(self, paths: Sequence[str], schema: SampleSchema, fmt: str) -> None:
        self.paths = tuple(paths)
        self.schema = schema
        self.format = fmt
        self.on_progress: Callable[[int], None] | None = None
        self.stats = SampleStats(fmt, self.paths)
        self.progress_unit, self.progress_total = _PROBES[fmt](self.paths, schema)

    def _tick(self, n: int) -> None:
        if self.on_progress is not None and n:
            self.on_progress(n)

    def __iter__(self) -> Iterator[dict[str, FeatureBatch]]:
        self.stats = SampleStats(self.format, self.paths)
        reader = _READERS[self.format]
        chunks = itertools.chain.from_iterable(
            reader(path, self.schema, self.stats, self._tick) for path in self.paths)
        yield from _rescale(chunks, self.schema, self.stats)
        if self.stats.batches == 0:
            short = min(self.schema.features,
                        key=lambda f: self.stats.bags_read.get(f.name, 0) / max(f.bags, 1))
            raise SampleError(
                f"the sample gives {self.stats.bags_read.get(short.name, 0)} bag(s) of feature "
                f"{short.name!r}, fewer than one configured batch of {short.bags}: give a larger "
                "sample", path=self.paths[0])
        self.stats.rescaled = any(
            sizes != {f.bags} for f in self.schema.features
            for sizes in [self.stats.sample_batch_bags.get(f.name, {f.bags})])


def open_sample(paths: str | Sequence[str], schema: SampleSchema, *,
                fmt: str | None = None) -> Sample:
    """The sample in ``paths`` (one file or several of one format, read in the order given; a
    folder stands for its files with a sample extension, :data:`FORMATS`, in name order: a day
    of ids written as part files); ``fmt``: ``"npz"``, ``"parquet"`` or ``"tfrecord"``
    (default: from the extension). The files are probed now (existence, the npz keys, the
    Parquet schema), so a bad file fails before any work starts. TypeError for ``paths`` or
    ``fmt`` of another type."""
    if isinstance(paths, str | os.PathLike):
        files: list[Any] = [paths]
    elif isinstance(paths, list | tuple) and all(isinstance(p, str | os.PathLike) for p in paths):
        files = list(paths)
    else:
        raise TypeError(f"ids must be a path or a list of paths (a B.npz, Parquet or TFRecord "
                        f"file, or a folder of them); received {type(paths).__name__}")
    if fmt is not None and not isinstance(fmt, str):
        raise TypeError(f"fmt must be None or one of 'npz', 'parquet', 'tfrecord'; received "
                        f"{type(fmt).__name__}")
    for feature in schema.features:
        if feature.bags < 1:  # no configured batch can be cut from the sample
            raise UsageError(
                f"feature {feature.name!r} (table {feature.table!r}) has a configured batch of "
                f"{feature.bags} bags (a batch dimension of 0: output_shape or input_shape), so "
                "there is no batch to plan; give it a batch of at least one row")
    if not files:
        raise UsageError("no sample file given: pass --ids FILE (a B.npz, Parquet or TFRecord)")
    names = [name for p in files for name in sample_files(os.fspath(p), fmt)]
    kinds = {fmt or _format_of(name) for name in names}
    if len(kinds) > 1:
        raise UsageError(f"the sample files are of {len(kinds)} formats ({', '.join(sorted(kinds))}"
                         "); give files of one format")
    kind = kinds.pop()
    if kind not in _READERS:
        raise UsageError(f"unknown sample format {kind!r}: expected npz, parquet or tfrecord")
    if kind == "npz" and len(names) > 1:
        raise UsageError("give one B.npz (its steps are numbered from 0)")
    for name in names:
        if not os.path.isfile(name):
            raise SampleError("file not found (or not a regular file)", path=name)
    return Sample(names, schema, kind)


def sample_files(path: str, fmt: str | None = None) -> list[str]:
    """``path``, or the sample files in the folder ``path`` (name order; with ``fmt``, the
    files of that format), refused when there are none: the files ``open_sample`` reads
    (``tpuemb plan`` checks its outputs against each of them)."""
    if not os.path.isdir(path):
        return [path]
    found = sorted(entry.path for entry in os.scandir(path) if entry.is_file()
                   and FORMATS.get(os.path.splitext(entry.name)[1].lower()) in
                   ((fmt,) if fmt else tuple(FORMATS.values())))
    if not found:
        raise SampleError(f"a folder without sample files (expected names ending in "
                          f"{', '.join(sorted(FORMATS))})", path=path)
    return found


def _format_of(name: str) -> str:
    ext = os.path.splitext(name)[1].lower()
    if ext not in FORMATS:
        known = ", ".join(sorted(FORMATS))
        raise SampleError(f"cannot tell the sample's format from the extension {ext or '(none)'!r}:"
                          f" expected one of {known}", path=name)
    return FORMATS[ext]


Tick = Callable[[int], None]


# --- replay B.npz -------------------------------------------------------------------------------

def _npz_steps(members: NpzMembers, schema: SampleSchema,
               ignored: set[str] | None = None) -> list[Any]:
    """The steps' inputs of the configured features; the keys of feature indexes past them
    are left out (``ignored``: gets those ``f{i}``)."""
    count = len(schema.features)
    headers = {}
    for key, header in members.headers.items():
        index = feature_of(key)
        if index is not None and index >= count:
            if ignored is not None:
                ignored.add(f"f{index}")
            continue
        headers[key] = header
    return [inputs for inputs, _ in parse_steps(headers, count, members.name)]


#: A step's (or a row group's) ids are held up to this many times while read, checked, queued
#: and merged into a configured batch: a step may take this share of the memory limit.
SAMPLE_COPIES = 4


#: What :func:`_read_limit` is, for messages.
READ_LIMIT = (f"the memory one read may take here (1/{SAMPLE_COPIES} of 80% of the memory "
              "available)")


def _read_limit() -> int | None:
    """The bytes one read (a ``B.npz`` step, a Parquet row group) may take once decompressed:
    a :data:`SAMPLE_COPIES`-th of the memory a run may use (None: unknown, no limit)."""
    limit = default_memory_limit()
    return None if limit is None else limit // SAMPLE_COPIES


def _probe_npz(paths: Sequence[str], schema: SampleSchema) -> tuple[str, int]:
    """The steps of the ``B.npz``, each step's arrays held against :func:`_read_limit` from the
    ``.npy`` headers (``npzio.check_total``, as ``simulate --batches``) before any is read."""
    limit = _read_limit()
    with NpzMembers(paths[0]) as members:
        steps = _npz_steps(members, schema)
        for step, inputs in enumerate(steps):
            keys = [f"s{step}/f{f}/{name}" for f, given in enumerate(inputs)
                    for name, present in (("ids", given.ids), ("row_splits", given.row_splits),
                                          ("weights", given.weights)) if present is not None]
            if limit is None:
                break
            check_total(members.name, members.headers, {k: members.headers[k] for k in keys},
                        limit, which=READ_LIMIT,
                        advice="split its steps into smaller batches, or plan on a machine with "
                               "more memory")
        return "steps", len(steps)


def _read_npz(path: str, schema: SampleSchema, stats: SampleStats,
              tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    with NpzMembers(path) as members:
        for step, inputs in enumerate(_npz_steps(members, schema, stats.ignored)):
            chunk = {}
            for f, (feature, given) in enumerate(zip(schema.features, inputs, strict=True)):
                arrays = [None if present is None else members.read(f"s{step}/f{f}/{name}")
                          for name, present in (("ids", given.ids),
                                                ("row_splits", given.row_splits),
                                                ("weights", given.weights))]
                batch = _check(feature, *arrays, path=path, where=f"key s{step}/f{f}")
                stats.sample_batch_bags.setdefault(feature.name, set()).add(batch.bags)
                chunk[feature.name] = batch
            yield chunk
            tick(1)


# --- Parquet ------------------------------------------------------------------------------------

def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"reading Parquet needs pyarrow, which is not installed: {_PLAN_EXTRA}"
                         ) from None
    return pq


def _parquet_file(path: str, schema: SampleSchema) -> Any:
    pq = _pyarrow()
    import pyarrow as pa

    try:
        handle = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise SampleError(f"cannot read as Parquet ({exc})", path=path) from None
    columns = handle.schema_arrow
    for f in schema.features:
        if columns.names.count(f.name) > 1:
            raise SampleError(
                f"{columns.names.count(f.name)} columns are named {f.name!r}: expected one column "
                "per configured feature; rename or drop the others", path=path,
                where=f"column {f.name}")
        if f.name not in columns.names:
            raise SampleError(
                f"no column {f.name!r}: expected one column per configured feature "
                f"({', '.join(schema.names)}); the file has {', '.join(columns.names)}",
                path=path, where=f"column {f.name}")
        kind = columns.field(f.name).type
        inner = kind.value_type if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) \
            else kind
        if not pa.types.is_integer(inner):
            raise SampleError(f"type {kind} found, expected list<int64> (a bag of ids per row) or "
                              "int64 (one id per row)", path=path, where=f"column {f.name}")
    return handle


def _probe_parquet(paths: Sequence[str], schema: SampleSchema) -> tuple[str, int]:
    """The rows of the files, each row group's configured columns held against
    :func:`_read_limit` from the file's metadata (``parquet.row_group_bytes``), nothing read."""
    limit = _read_limit()
    rows = 0
    for path in paths:
        metadata = _parquet_file(path, schema).metadata
        first = 0
        for group in range(metadata.num_row_groups):
            size = row_group_bytes(metadata, group, schema.names)
            if limit is not None and size > limit:
                raise SampleError(
                    f"the configured columns of this row group take {format_size(size)} once "
                    f"decompressed (from the file's metadata), more than {READ_LIMIT} of "
                    f"{format_size(limit)}; nothing was decompressed - write the sample with "
                    "smaller row groups (pyarrow: row_group_size=), or plan on a machine with "
                    "more memory", path=path, where=row_group_place(metadata, group, first))
            first += metadata.row_group(group).num_rows
        rows += first
    return "rows", rows


def _parquet_column(column: Any, feature: SampleFeature, path: str,
                    first_row: int) -> FeatureBatch:
    import pyarrow as pa
    import pyarrow.compute as pc

    where = f"column {feature.name}"
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        flat = column.flatten()
    else:
        lengths = np.where(column.is_null().to_numpy(zero_copy_only=False), 0, 1)
        flat = column.drop_null()
    if flat.null_count:
        bag = int(np.searchsorted(np.cumsum(lengths),
                                  np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0],
                                  side="right"))
        raise SampleError(f"a null id in row {first_row + bag}: expected integer ids (a missing "
                          "bag is a null list, not a null inside one)", path=path, where=where)
    splits = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=splits[1:])
    values = flat.to_numpy(zero_copy_only=False)

    def at(index: int) -> tuple[str, str]:
        return where, f"row {first_row + int(np.searchsorted(splits, index, side='right')) - 1}"

    return _check(feature, values, splits, None, path=path, where=where, at=at)


def _read_parquet(path: str, schema: SampleSchema, stats: SampleStats,
                  tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    import pyarrow as pa

    handle = _parquet_file(path, schema)  # its row groups' sizes were checked by the probe
    stats.ignored.update(set(handle.schema_arrow.names) - set(schema.names))
    metadata = handle.metadata
    row = 0
    for group in range(metadata.num_row_groups):
        where = row_group_place(metadata, group, row)
        batches = handle.iter_batches(batch_size=ROWS_PER_READ, row_groups=[group],
                                      columns=list(schema.names))
        while True:
            try:
                record_batch = next(batches)
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as exc:
                column = bad_column(handle, group, schema.names, ROWS_PER_READ)
                raise SampleError(f"cannot read the data ({exc}): a corrupt or truncated "
                                  "Parquet file; write it again", path=path,
                                  where=where if column is None else f"{where}, column {column}"
                                  ) from None
            yield {f.name: _parquet_column(record_batch.column(f.name), f, path, row)
                   for f in schema.features}
            row += record_batch.num_rows
            tick(record_batch.num_rows)


# --- TFRecord -----------------------------------------------------------------------------------

def _probe_tfrecord(paths: Sequence[str], schema: SampleSchema) -> tuple[str, int]:
    for path in paths:
        with open(path, "rb") as handle:
            kind = compression(handle.read(12))
        if kind is not None:
            raise SampleError(
                f"a {kind}-compressed file (TFRecordOptions compression_type {kind.upper()!r}): "
                "TFRecord files are read uncompressed; decompress it first "
                f"({'gunzip' if kind == 'gzip' else 'zlib.decompress'}) or write it "
                "uncompressed", path=path)
    return "bytes", sum(os.path.getsize(p) for p in paths)


#: Bytes read from a TFRecord file at a time (a record larger than this is read whole).
_CHUNK = 1 << 22


def _frames(path: str, window: int) -> Iterator[tuple[int, list[bytes], list[int]]]:
    """(index of the first record, records' data, their byte offsets) per window of at most
    ``window`` records, every CRC verified. The file is read :data:`_CHUNK` bytes at a time and
    the frames cut from memory. A length that runs past the end of the file is reported before
    its data is read (its own CRC first: a wrong one means no TFRecord)."""
    index = 0
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        buffer, base, pos = b"", 0, 0  # buffer[pos] is byte base + pos of the file

        def fill(need: int) -> None:
            nonlocal buffer, base, pos
            if len(buffer) - pos < need:
                buffer = buffer[pos:] + handle.read(max(_CHUNK, need))
                base, pos = base + pos, 0

        while True:
            heads: list[bytes] = []
            datas: list[bytes] = []
            offsets: list[int] = []
            crcs: list[int] = []
            while len(datas) < window:
                fill(12)
                if pos == len(buffer):
                    break
                offset = base + pos
                where = f"record {index + len(datas)} (byte {offset})"
                if len(buffer) - pos < 12:
                    raise SampleError(f"the file ends {len(buffer) - pos} byte(s) into a record's "
                                      "12-byte header: a truncated file", path=path, where=where)
                head = buffer[pos:pos + 12]
                (length,) = struct.unpack_from("<Q", buffer, pos)
                if offset + 16 + length > size:
                    _bad_header(path, head, where)
                    raise SampleError(
                        f"the record declares {length} bytes of data but the file ends "
                        f"{size - offset - 12} bytes after its header: a truncated file",
                        path=path, where=where)
                fill(16 + length)
                heads.append(head)
                datas.append(buffer[pos + 12:pos + 12 + length])
                offsets.append(offset)
                crcs.append(struct.unpack_from("<I", buffer, pos + 12 + length)[0])
                pos += 16 + length
            if not datas:
                return
            _verify(path, index, heads, datas, offsets, crcs)
            yield index, datas, offsets
            index += len(datas)


def _bad_header(path: str, head: bytes, where: str) -> None:
    """Raise when the length's own CRC is wrong (the length is then not to be trusted)."""
    expected = masked_crc32c(head[:8])
    found = struct.unpack("<I", head[8:12])[0]
    if found != expected:
        raise SampleError(
            f"the CRC of the length is 0x{found:08x}, expected 0x{expected:08x}: not a TFRecord "
            "file, or a corrupted one", path=path, where=where)


def _verify(path: str, first: int, heads: list[bytes], datas: list[bytes], offsets: list[int],
            crcs: list[int]) -> None:
    """Check both masked CRCs of every record of a window, vectorised."""
    lengths = np.array([len(d) for d in datas], dtype=np.int64)
    blob = np.frombuffer(b"".join(h[:8] for h in heads) + b"".join(datas), dtype=np.uint8)
    n = len(datas)
    starts = np.concatenate([np.arange(n, dtype=np.int64) * 8,
                             8 * n + np.concatenate([[0], np.cumsum(lengths)[:-1]])])
    sums = mask(crc32c_many(blob, starts.astype(np.int64),
                              np.concatenate([np.full(n, 8, np.int64), lengths])))
    found_len = np.array([struct.unpack("<I", h[8:12])[0] for h in heads], dtype=np.uint32)
    found_data = np.array(crcs, dtype=np.uint32)
    for i in np.flatnonzero((sums[:n] != found_len) | (sums[n:] != found_data)):
        which, found, expected = (("length", found_len[i], sums[i]) if sums[i] != found_len[i]
                                  else ("data", found_data[i], sums[n + i]))
        raise SampleError(
            f"the CRC of the {which} is 0x{int(found):08x}, expected 0x{int(expected):08x}: a "
            "corrupted file (or not a TFRecord file)", path=path,
            where=f"record {first + int(i)} (byte {offsets[int(i)]})")


def _read_tfrecord(path: str, schema: SampleSchema, stats: SampleStats,
                   tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    from google.protobuf.message import DecodeError

    from ..proto.example_pb2 import Example

    for first, datas, offsets in _frames(path, ROWS_PER_READ):
        columns: dict[str, list[Any]] = {f.name: [] for f in schema.features}
        named = list(columns.items())
        for i, data in enumerate(datas):
            try:
                features = Example.FromString(data).features.feature
            except DecodeError as exc:
                raise SampleError(f"not a tf.train.Example ({exc})", path=path,
                                  where=f"record {first + i} (byte {offsets[i]})") from None
            if len(features) > len(named):
                stats.ignored.update(k for k in features if k not in columns)
            for name, column in named:
                if name not in features:  # (indexing a message map would add the key)
                    _bad_feature(path, f"record {first + i} (byte {offsets[i]})", features, name)
                ids = features[name].int64_list.value
                if not ids and features[name].WhichOneof("kind") not in ("int64_list", None):
                    _bad_feature(path, f"record {first + i} (byte {offsets[i]})", features, name)
                column.append(ids)
        chunk = {}
        for f in schema.features:
            lists = columns[f.name]
            splits = np.zeros(len(lists) + 1, dtype=np.int64)
            np.cumsum([len(v) for v in lists], out=splits[1:])
            values = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64,
                                 count=int(splits[-1]))
            chunk[f.name] = _check(f, values, splits, None, path=path, where=f"feature {f.name}",
                                   at=_record_of(first, offsets, splits))
        yield chunk
        tick(sum(len(d) + 16 for d in datas))


def _bad_feature(path: str, where: str, features: Any, name: str) -> None:
    """Raise for feature ``name`` of a record: missing, or not an ``int64_list``."""
    if name not in features:
        have = ", ".join(sorted(features)) or "no feature"
        raise SampleError(f"feature {name!r} is missing (the record has {have}); expected one "
                          "int64_list feature per configured feature", path=path, where=where)
    raise SampleError(f"feature {name!r} is a {features[name].WhichOneof('kind')}, expected an "
                      "int64_list of ids", path=path, where=where)


def _record_of(first: int, offsets: Sequence[int],
               splits: np.ndarray) -> Callable[[int], tuple[str, str]]:
    """Where id ``index`` of a window's column is: its record and its position there."""
    def at(index: int) -> tuple[str, str]:
        record = int(np.searchsorted(splits, index, side="right")) - 1
        return (f"record {first + record} (byte {offsets[record]})",
                f"position {index - int(splits[record])}")

    return at


_READERS: dict[str, Callable[[str, SampleSchema, SampleStats, Tick],
                             Iterator[dict[str, FeatureBatch]]]] = {
    "npz": _read_npz, "parquet": _read_parquet, "tfrecord": _read_tfrecord,
}
_PROBES: dict[str, Callable[[Sequence[str], SampleSchema], tuple[str, int]]] = {
    "npz": _probe_npz, "parquet": _probe_parquet, "tfrecord": _probe_tfrecord,
}

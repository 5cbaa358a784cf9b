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
  ``executor.replay_keys.parse_steps``: unexpected keys, gaps, a step that skips a feature),
  then one step is read at a time. For a SparseCore configuration ``f{i}`` is the spec's ``i``-th
  feature.
- **Parquet** (``.parquet``, ``.pq``; pyarrow, the optional extra ``[plan]``): one column per
  configured feature, named as the feature, of type ``list<integer>`` (a bag per row) or
  ``integer`` (one id per row); a null is an empty bag. Read a record batch at a time
  (:func:`~planner.samples.rows_per_read` rows); a list column without nulls is taken from
  Arrow's buffers (the ids without a copy, the row splits from the list offsets). The next
  record batch is decoded in a background thread meanwhile (:mod:`planner.readahead`).
- **TFRecord** (``.tfrecord``, ``.tfrecords``, ``.tfr``) of ``tf.train.Example``: one
  ``int64_list`` feature per configured feature (absent from a record: an error; empty: an
  empty bag). The framing (little-endian uint64 length, masked CRC32C of the length, the data,
  masked CRC32C of the data) is read by :mod:`planner.tfrecord` and both CRCs are verified
  (:func:`crc32c`); messages are decoded with tpuemb's own copy of ``example.proto`` (no
  TensorFlow), in compiled kernels where numba is available (:mod:`planner.tfrecord_kernels`).

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
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats.limits import default_memory_limit
from tpuemb_cfg.formats.npzio import NpzMembers, check_total

from ..executor.replay_keys import feature_of, parse_steps
from .parquet import bad_column, row_group_bytes, row_group_place
from .readahead import read_ahead
from .samples import (
    FeatureBatch,
    SampleError,
    SampleFeature,
    SampleSchema,
    SampleStats,
    Tick,
    check_batch,
    rows_per_read,
)
from .tfrecord import crc32c, masked_crc32c, probe_tfrecord, read_tfrecord, write_tfrecord

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
_PLAN_EXTRA = "pip install 'tpuemb[plan]'"



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
                batch = check_batch(feature, *arrays, path=path, where=f"key s{step}/f{f}")
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

    where = f"column {feature.name}"
    listed = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
    if listed and not column.null_count and not column.values.null_count:
        # no null bag and no null id: the ids and row splits are Arrow's own buffers (no copy
        # of the ids; the offsets, int32 or int64, rebased to 0 as int64)
        offsets = column.offsets.to_numpy()
        first = int(offsets[0])
        values = column.values.slice(first, int(offsets[-1]) - first).to_numpy()
        splits = offsets.astype(np.int64) - first if first or offsets.dtype != np.int64 \
            else offsets
    elif listed:
        import pyarrow.compute as pc  # 30-50 ms to import: only a sample with null bags needs it

        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        flat = column.flatten()
    else:
        lengths = np.where(column.is_null().to_numpy(zero_copy_only=False), 0, 1)
        flat = column.drop_null()
    if not listed or column.null_count or column.values.null_count:
        if flat.null_count:
            nulls = np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))
            bag = int(np.searchsorted(np.cumsum(lengths), nulls[0], side="right"))
            raise SampleError(f"a null id in row {first_row + bag}: expected integer ids (a "
                              "missing bag is a null list, not a null inside one)", path=path,
                              where=where)
        splits = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=splits[1:])
        values = flat.to_numpy(zero_copy_only=False)

    def at(index: int) -> tuple[str, str]:
        return where, f"row {first_row + int(np.searchsorted(splits, index, side='right')) - 1}"

    return check_batch(feature, values, splits, None, path=path, where=where, at=at)


def _record_batches(handle: Any, rows: int, names: list[str]) -> Iterator[tuple[int, Any, Any]]:
    """(row group, record batch, None) for each record batch of the file in order, ending
    with (row group, None, the exception) when one cannot be read."""
    import pyarrow as pa

    for group in range(handle.metadata.num_row_groups):
        try:
            for record_batch in handle.iter_batches(batch_size=rows, row_groups=[group],
                                                    columns=names):
                yield group, record_batch, None
        except (OSError, pa.ArrowException) as exc:
            yield group, None, exc
            return


def _read_parquet(path: str, schema: SampleSchema, stats: SampleStats,
                  tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    handle = _parquet_file(path, schema)  # its row groups' sizes were checked by the probe
    stats.ignored.update(set(handle.schema_arrow.names) - set(schema.names))
    metadata = handle.metadata
    row = 0
    rows = rows_per_read(schema)
    for group, record_batch, exc in read_ahead(_record_batches(handle, rows,
                                                               list(schema.names))):
        if exc is not None:
            first = sum(metadata.row_group(g).num_rows for g in range(group))
            where = row_group_place(metadata, group, first)
            column = bad_column(handle, group, schema.names, rows)
            raise SampleError(f"cannot read the data ({exc}): a corrupt or truncated "
                              "Parquet file; write it again", path=path,
                              where=where if column is None else f"{where}, column {column}"
                              ) from None
        yield {f.name: _parquet_column(record_batch.column(f.name), f, path, row)
               for f in schema.features}
        row += record_batch.num_rows
        tick(record_batch.num_rows)


_READERS: dict[str, Callable[[str, SampleSchema, SampleStats, Tick],
                             Iterator[dict[str, FeatureBatch]]]] = {
    "npz": _read_npz, "parquet": _read_parquet, "tfrecord": read_tfrecord,
}
_PROBES: dict[str, Callable[[Sequence[str], SampleSchema], tuple[str, int]]] = {
    "npz": _probe_npz, "parquet": _probe_parquet, "tfrecord": probe_tfrecord,
}

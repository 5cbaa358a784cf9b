"""Reshard an embedding checkpoint's variables from one layout to another, in bounded memory.

**The plan** (:func:`plan_reshard`). Each side is either SparseCore stacked variables with their
layouts (a ``SparseCoreTableLayouts`` message, as a checkpoint stores it under
``_sparse_core_table_layouts``, or :class:`~tpuemb_cfg.model.checkpoint.LayoutRecord`\\ s, e.g.
``sparsecore.summary.layouts_of(config, tf_version=...)`` of the configuration to move to), or
per-table variables (the mid-level API's and ``TPUEmbeddingForServing``'s: one variable per
table, named as it, of its ``(vocabulary_size, dim)``). For each NEW variable (a stack, or a
table, and each slot ``name/slot``) the plan says, per table, which OLD variable and layout its
rows come from. The rules are TensorFlow 2.21's (``tpu_embedding_v3_checkpoint_adapter``):

- both sides stacked and every table's layout equal (``is_layouts_same``): no adapter, every
  variable copied as it is, padding included;
- otherwise each table is unsharded with OLD's layout (``_unshard_from_sc_to_cpu``), padded
  with zeros to NEW's padded shape and sharded with NEW's layout (``_shard_from_cpu_to_sc``):
  NEW's padding rows and columns are zero, whatever OLD's held (every stack is rebuilt, even one
  whose own layouts did not change, as TensorFlow's adapter does);
- **slots are resharded with their stack** (``stack/slot`` from each table's OLD ``.../slot``).
  TensorFlow's adapter files a slot under its stack's callback and never restores it
  (CKPT004, docs/diff/checkpoints.md); tpuemb applies the parameters' row map to every slot;
- a table NEW has and OLD lacks, or whose shape differs, is refused (:class:`ReshardError`
  naming it; TensorFlow raises or gives a tensor of the wrong size: CKPT001, CKPT002), unless
  ``resize=True``: then the rows and columns both have are copied and the rest is zero.
  OLD's tables NEW lacks are left out (``ReshardPlan.dropped``).

**The execution** (:func:`execute_reshard`) writes each NEW variable in row order, a block of
rows at a time, into a :class:`RowSink`, reading from a :class:`RowSource` only the OLD rows the
block needs: NEW row ``g`` of a stack is table row ``j`` of table ``t``
(:func:`~tpuemb_cfg.checkpoints.sharding.table_rows`), which OLD holds at stacked row
:func:`~tpuemb_cfg.checkpoints.sharding.shard_rows` (or at row ``j`` of a per-table variable).
A block's OLD rows are sorted and read as contiguous runs (a gap of at most ``amplification``
rows is read through), each run at most a bounded span, and gathered with one fancy index per
run: memory is the block, one run and the index arrays, and the block size follows from
:data:`CAP_SHARE` of the caller's ``memory_cap`` (bytes). A cap that cannot hold
:data:`MIN_BLOCK_ROWS` rows of some variable is refused before anything is read or written.

``amplification`` (:attr:`ReshardPlan.amplification`): the rows a block of one NEW shard needs
from one OLD shard are every ``N_new / gcd(N_new, N_old)``-th row of a run (1 when NEW's
SparseCores divide OLD's; ``N_new`` from per-table variables, since a shard takes every
``N``-th row of a table); the runs are read whole, so that is the factor of bytes read to bytes
needed. Exact rows are never copied one by one in Python: a block is a few vectorised passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tpuemb_cfg.checkpoints.sharding import (
    LayoutError,
    as_records,
    shard_rows,
    stack_shape,
    stacks_of,
    table_rows,
)
from tpuemb_cfg.model.checkpoint import (
    DEFAULT_OBJECT_PATH,
    PARAMETERS,
    LayoutRecord,
    checkpoint_key,
)

__all__ = ["MIN_BLOCK_ROWS", "ArraySink", "ArraySource", "KeyedSink", "KeyedSource",
           "NewVariable", "ReshardError", "ReshardPlan", "ReshardStats", "RowSink", "RowSource",
           "TableSource", "execute_reshard", "plan_reshard", "reshard_arrays"]

#: The fewest rows a block may have: a memory cap below one such block is refused.
MIN_BLOCK_ROWS = 8
#: Bytes per row of a block for the index arrays (row numbers, tables, table rows, masks, the
#: sort order of the rows to read and where they go): about a dozen int64 or bool arrays.
INDEX_BYTES_PER_ROW = 112
#: The part of the cap the blocks are sized for: the rest is left to the allocator (freed index
#: arrays the C heap keeps) and the interpreter. Measured: a 4 GiB reshard sized for the whole
#: 256 MiB cap peaked 307 MiB above the interpreter (benchmarks/bench_reshard.py).
CAP_SHARE = 0.75

class ReshardError(LayoutError):
    """A reshard tpuemb refuses: a table missing or changed, layouts that disagree with the
    arrays, a memory cap too small. The message names the table or variable."""


# -- the source and the sink --------------------------------------------------------------------

class RowSource(Protocol):
    """Named 2-D variables, read a range of rows at a time (a checkpoint reader)."""

    def shape(self, name: str) -> tuple[int, ...]: ...

    def dtype(self, name: str) -> np.dtype[Any]: ...

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray: ...


class RowSink(Protocol):
    """Takes a named variable's rows in order, block by block (a checkpoint writer)."""

    def add_rows(self, name: str, shape: tuple[int, int], dtype: np.dtype[Any],
                 chunks: Iterable[np.ndarray]) -> None: ...


class ArraySource:
    """A :class:`RowSource` over arrays in memory, by name (tests, small checkpoints)."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays = dict(arrays)

    def _get(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            raise ReshardError(f"the checkpoint has no variable {name!r} (it has "
                               f"{', '.join(map(repr, sorted(self.arrays)))})", variable=name)
        return self.arrays[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._get(name).shape)

    def dtype(self, name: str) -> np.dtype[Any]:
        return self._get(name).dtype

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        return self._get(name)[start:stop]


class ArraySink:
    """A :class:`RowSink` keeping each variable as one array (``.arrays``), checking that the
    chunks add up to the shape announced."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def add_rows(self, name: str, shape: tuple[int, int], dtype: np.dtype[Any],
                 chunks: Iterable[np.ndarray]) -> None:
        out = np.empty(shape, dtype=dtype)
        at = 0
        for chunk in chunks:
            out[at:at + len(chunk)] = chunk
            at += len(chunk)
        if at != shape[0]:
            raise ReshardError(f"variable {name!r}: {at} rows written of {shape[0]}",
                               variable=name)
        self.arrays[name] = out


class _Keyed:
    """A variable's local name as a checkpoint key: under ``object_path``
    (:func:`~tpuemb_cfg.model.checkpoint.checkpoint_key`), or ``key_of(name)`` when given."""

    def __init__(self, object_path: str = DEFAULT_OBJECT_PATH, *,
                 key_of: Callable[[str], str] | None = None) -> None:
        self.object_path = object_path
        self._key_of = key_of

    def key(self, name: str) -> str:
        if self._key_of is not None:
            return self._key_of(name)
        return checkpoint_key(self.object_path, name)


class KeyedSource(_Keyed):
    """A :class:`RowSource` over a checkpoint reader keyed by checkpoint keys (the
    ``BundleReader`` interface: ``entry(key)`` with ``.shape`` and ``.dtype``,
    ``read_rows(key, start, stop)``): a variable's local name becomes its key under
    ``object_path`` (:func:`~tpuemb_cfg.model.checkpoint.checkpoint_key`), or ``key_of(name)``
    when given (a jax-tpu-embedding checkpoint's Orbax keys: the found variables' ``key``)."""

    def __init__(self, reader: Any, object_path: str = DEFAULT_OBJECT_PATH, *,
                 key_of: Callable[[str], str] | None = None) -> None:
        super().__init__(object_path, key_of=key_of)
        self.reader = reader

    def _entry(self, name: str) -> Any:
        key = self.key(name)
        try:
            return self.reader.entry(key)
        except KeyError:
            raise ReshardError(f"the checkpoint has no variable {name!r} (key {key!r})",
                               variable=name) from None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entry(name).shape)

    def dtype(self, name: str) -> np.dtype[Any]:
        found = self._entry(name).dtype
        if isinstance(found, str) and found == "string":
            raise ReshardError(f"variable {name!r} holds strings: only numeric variables are "
                               "resharded", variable=name)
        dtype: np.dtype[Any] = np.dtype(found)
        return dtype

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        rows: np.ndarray = self.reader.read_rows(self.key(name), start, stop)
        return rows


class KeyedSink(_Keyed):
    """A :class:`RowSink` over a checkpoint writer keyed by checkpoint keys (``BundleWriter``,
    ``formats.orbax_write.OrbaxStepWriter``: ``add_rows(key, shape, dtype, chunks)``); the keys
    as :class:`KeyedSource` makes them (``key_of``: a jax-tpu-embedding checkpoint's Orbax keys,
    ``model.jax_checkpoint.jax_key``)."""

    def __init__(self, writer: Any, object_path: str = DEFAULT_OBJECT_PATH, *,
                 key_of: Callable[[str], str] | None = None) -> None:
        super().__init__(object_path, key_of=key_of)
        self.writer = writer

    def add_rows(self, name: str, shape: tuple[int, int], dtype: np.dtype[Any],
                 chunks: Iterable[np.ndarray]) -> None:
        self.writer.add_rows(self.key(name), shape, dtype, chunks)


# -- the plan -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TableSource:
    """Where one table's rows of a NEW variable come from: the OLD ``variable`` (local name),
    OLD's ``layout`` of the table (None: a per-table variable, row ``j`` at row ``j``), the
    table's OLD ``shape`` and the ``rows`` and ``cols`` copied (the common part: its whole
    shape unless resized)."""

    table: str
    variable: str
    layout: LayoutRecord | None
    shape: tuple[int, int]
    rows: int
    cols: int


@dataclass(frozen=True)
class NewVariable:
    """One variable of NEW: its local ``name``, ``slot`` (``parameters`` or the slot's name),
    ``shape``, NEW's ``layouts`` of its tables by row offset (() for a per-table variable), the
    ``sources`` of its tables (in the same order), or ``copy_of``: the OLD variable copied as
    it is (TensorFlow's plain restore: no adapter)."""

    name: str
    slot: str
    shape: tuple[int, int]
    layouts: tuple[LayoutRecord, ...]
    sources: tuple[TableSource, ...]
    copy_of: str | None = None

    def inputs(self) -> tuple[str, ...]:
        """The OLD variables it reads."""
        if self.copy_of is not None:
            return (self.copy_of,)
        return tuple(dict.fromkeys(s.variable for s in self.sources))


@dataclass(frozen=True)
class ReshardPlan:
    """What to write and where each table's rows come from. ``adapter``: TensorFlow's checkpoint
    adapter would reshard (False: every layout equal, the variables are copied); ``dropped``:
    OLD's tables NEW does not have; ``resized``: tables whose shape changed (``resize=True``)."""

    variables: tuple[NewVariable, ...]
    adapter: bool
    dropped: tuple[str, ...] = ()
    resized: tuple[str, ...] = ()

    @property
    def amplification(self) -> int:
        """The largest factor of rows read to rows needed (see the module's docstring)."""
        return max((_amplification(v, s) for v in self.variables for s in v.sources), default=1)

    def inputs(self) -> tuple[str, ...]:
        """Every OLD variable the plan reads."""
        return tuple(dict.fromkeys(n for v in self.variables for n in v.inputs()))


def _amplification(var: NewVariable, src: TableSource) -> int:
    if not var.layouts:
        return 1
    n_new = var.layouts[0].num_sparse_cores
    n_old = src.layout.num_sparse_cores if src.layout is not None else 1
    return n_new // math.gcd(n_new, n_old)


@dataclass(frozen=True)
class _Side:
    stacks: dict[str, tuple[LayoutRecord, ...]] | None   # None: per-table
    shapes: dict[str, tuple[int, int]]                     # table -> (rows, dim)
    records: tuple[LayoutRecord, ...] = ()
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)  # variable base -> slots

    def owner(self, table: str) -> str:
        """The variable (stack or table) holding ``table``."""
        if self.stacks is None:
            return table
        return next(s for s, ls in self.stacks.items() if any(r.table_name == table for r in ls))


def _slots_of(slots: Sequence[str] | Mapping[str, Sequence[str]], tables: Sequence[str]
              ) -> tuple[str, ...]:
    """A variable's slots: ``slots`` itself, or (table -> slots) those of its first table by
    name, as ``TPUEmbeddingV2`` takes a stack's optimizer."""
    if isinstance(slots, Mapping):
        return tuple(slots.get(min(tables), ()))
    return tuple(slots)


def _side(value: Any, other: Any, slots: Sequence[str] | Mapping[str, Sequence[str]],
          role: str) -> _Side:
    if isinstance(value, Mapping):
        shapes = {}
        for table, shape in value.items():
            dims = tuple(int(d) for d in shape)
            if len(dims) != 2 or min(dims) < 1:
                raise ReshardError(f"{role} table {table!r}: shape {list(dims)}; expected "
                                   "[rows, dim], both at least 1", table=table)
            shapes[str(table)] = (dims[0], dims[1])
        return _Side(None, shapes, slots={t: _slots_of(slots, [t]) for t in shapes})
    if value is None:
        if other is None or isinstance(other, Mapping):
            raise ReshardError("per-table variables on both sides: give the tables' shapes on "
                               "one side (or layouts) - there is nothing to reshard")
        records = as_records(other)
        shapes = {r.table_name: (r.unsharded_shape[0], r.unsharded_shape[1]) for r in records}
        return _Side(None, shapes, slots={t: _slots_of(slots, [t]) for t in shapes})
    records = as_records(value)
    if not records:
        raise ReshardError(f"{role} has no table layouts")
    stacks = stacks_of(records)
    shapes = {r.table_name: (r.unsharded_shape[0], r.unsharded_shape[1]) for r in records}
    return _Side(stacks, shapes, records,
                 {s: _slots_of(slots, [r.table_name for r in ls]) for s, ls in stacks.items()})


def plan_reshard(old: Any, new: Any, *,
                 slots: Sequence[str] | Mapping[str, Sequence[str]] = (),
                 resize: bool = False) -> ReshardPlan:
    """The plan from ``old`` to ``new``. Each side: a ``SparseCoreTableLayouts`` message or a
    sequence of ``LayoutRecord`` (stacked variables), a mapping table -> (rows, dim) (per-table
    variables), or None (per-table variables of the shapes the other side's layouts give).
    ``slots``: the slot names of every variable (``("accumulators",)``), or table -> its
    optimizer's slot names (a stack takes its first table's by name); each NEW slot must exist
    in OLD for every table. ``resize``: copy the common rows and columns of a table whose shape
    changed (zeros elsewhere) instead of refusing it."""
    a = _side(old, new, slots, "OLD")
    b = _side(new, old, slots, "NEW")
    missing = sorted(set(b.shapes) - set(a.shapes))
    if missing:
        raise ReshardError(f"table(s) {', '.join(map(repr, missing))} of NEW are not in the "
                           f"checkpoint (it has {', '.join(map(repr, sorted(a.shapes)))}): "
                           "nothing to take their rows from", table=missing[0])
    resized = sorted(t for t in b.shapes if a.shapes[t] != b.shapes[t])
    if resized and not resize:
        t = resized[0]
        raise ReshardError(
            f"table {t!r} is {list(a.shapes[t])} in the checkpoint and {list(b.shapes[t])} under "
            "NEW: a reshard keeps every table's shape (TensorFlow's adapter gives a tensor of the "
            "wrong size, CKPT002); resize=True (the command's --resize) copies the rows and "
            "columns both have and fills the rest with zeros", table=t)
    dropped = tuple(sorted(set(a.shapes) - set(b.shapes)))
    if a.stacks is not None and b.stacks is not None and a.records == b.records:
        return ReshardPlan(_copies(b), adapter=False, dropped=dropped)
    return ReshardPlan(_variables(a, b), adapter=True, dropped=dropped, resized=tuple(resized))


def _copies(b: _Side) -> tuple[NewVariable, ...]:
    assert b.stacks is not None
    out = []
    for stack, layouts in b.stacks.items():
        for slot in (PARAMETERS, *b.slots[stack]):
            name = stack if slot == PARAMETERS else f"{stack}/{slot}"
            out.append(NewVariable(name, slot, stack_shape(layouts), layouts, (), copy_of=name))
    return tuple(out)


def _variables(a: _Side, b: _Side) -> tuple[NewVariable, ...]:
    out = []
    owners: Mapping[str, tuple[LayoutRecord, ...]]
    owners = b.stacks if b.stacks is not None else {t: () for t in sorted(b.shapes)}
    for owner, layouts in owners.items():
        tables = [r.table_name for r in layouts] if layouts else [owner]
        shape = stack_shape(layouts) if layouts else b.shapes[owner]
        for slot in (PARAMETERS, *b.slots[owner]):
            sources = []
            for table in tables:
                old_owner = a.owner(table)
                if slot != PARAMETERS and slot not in a.slots[old_owner]:
                    have = ", ".join(map(repr, a.slots[old_owner])) or "none"
                    raise ReshardError(
                        f"table {table!r}: NEW's {owner!r} has slot {slot!r}; the checkpoint's "
                        f"{old_owner!r} has slots {have} (an optimizer change: start that slot "
                        "from its initializer instead of resharding it)", table=table)
                old_layout = (None if a.stacks is None else
                              next(r for r in a.stacks[old_owner] if r.table_name == table))
                (rows, dim), (new_rows, new_dim) = a.shapes[table], b.shapes[table]
                sources.append(TableSource(
                    table, old_owner if slot == PARAMETERS else f"{old_owner}/{slot}",
                    old_layout, (rows, dim), min(rows, new_rows), min(dim, new_dim)))
            name = owner if slot == PARAMETERS else f"{owner}/{slot}"
            out.append(NewVariable(name, slot, shape, tuple(layouts), tuple(sources)))
    return tuple(out)


# -- the execution ------------------------------------------------------------------------------

@dataclass
class ReshardStats:
    """What :func:`execute_reshard` did: variables and rows written, bytes written and read,
    blocks, the largest block (rows), ``read_calls`` to the source."""

    variables: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    blocks: int = 0
    block_rows: int = 0
    read_calls: int = 0


def _check_inputs(plan: ReshardPlan, source: RowSource) -> dict[str, np.dtype[Any]]:
    """Every OLD variable exists with the shape its layouts (or its table) give and a numeric
    dtype; a NEW variable's inputs share one dtype. Returns NEW name -> dtype."""
    expected: dict[str, tuple[tuple[int, int], str]] = {}
    for var in plan.variables:
        if var.copy_of is not None:
            expected[var.copy_of] = (var.shape, f"stack {var.copy_of!r}")
        for src in var.sources:
            if src.layout is None:
                expected[src.variable] = (src.shape, f"table {src.table!r}")
    stacked: dict[str, list[LayoutRecord]] = {}
    for var in plan.variables:
        for src in var.sources:
            if src.layout is not None:
                group = stacked.setdefault(src.variable, [])
                if src.layout not in group:
                    group.append(src.layout)
    for name, layouts in stacked.items():
        first = layouts[0]
        rows = first.num_sparse_cores * first.total_rows_per_sparse_core_shard
        expected[name] = ((rows, first.unsharded_padded_shape[1]),
                          f"stack {first.stacked_table_name!r} "
                          f"({first.num_sparse_cores} SparseCores x "
                          f"{first.total_rows_per_sparse_core_shard} rows)")
    dtypes: dict[str, np.dtype[Any]] = {}
    for name, (shape, what) in expected.items():
        found = tuple(source.shape(name))
        if found != shape:
            raise ReshardError(f"variable {name!r} is {list(found)} in the checkpoint; the "
                               f"layouts of {what} say {list(shape)}", variable=name)
        dtype = np.dtype(source.dtype(name))
        if dtype.kind not in "fiub":
            raise ReshardError(f"variable {name!r} has dtype {dtype}: only numeric variables "
                               "are resharded", variable=name)
        dtypes[name] = dtype
    out = {}
    for var in plan.variables:
        kinds = {dtypes[n] for n in var.inputs()}
        if len(kinds) > 1:
            raise ReshardError(f"variable {var.name!r} takes rows of dtypes "
                               f"{', '.join(sorted(map(str, kinds)))}: they must be one",
                               variable=var.name)
        out[var.name] = kinds.pop()
    return out


def _row_costs(var: NewVariable, dtype: np.dtype[Any]) -> int:
    """Bytes per row of a block: the block, one copy by the sink, the gathered rows and the
    widest run read (``amplification`` rows per row), the index arrays."""
    width = var.shape[1] * dtype.itemsize
    if var.copy_of is not None:
        return 3 * width
    amp = max((_amplification(var, s) for s in var.sources), default=1)
    old_width = max(_old_width(s) for s in var.sources) * dtype.itemsize
    return 2 * width + (amp + 1) * old_width + INDEX_BYTES_PER_ROW


def _old_width(src: TableSource) -> int:
    return src.shape[1] if src.layout is None else src.layout.unsharded_padded_shape[1]


def execute_reshard(plan: ReshardPlan, source: RowSource, sink: RowSink, *,
                    memory_cap: int, progress: Callable[[str, int, int], None] | None = None
                    ) -> ReshardStats:
    """Write every variable of ``plan`` into ``sink``, in plan order, each in row order, reading
    ``source``; at most ``memory_cap`` bytes of blocks, runs and indices at a time (see the
    module's docstring; a sink keeping the rows, like :class:`ArraySink`, needs its own).
    Checks every input's shape and dtype, and that the cap holds a block of each variable,
    before reading a row. ``progress(name, rows_done, rows)`` after each block."""
    if not isinstance(memory_cap, int) or isinstance(memory_cap, bool) or memory_cap < 1:
        raise ReshardError(f"memory_cap must be a positive number of bytes; found {memory_cap!r}")
    dtypes = _check_inputs(plan, source)
    sizes = {}
    for var in plan.variables:
        cost = _row_costs(var, dtypes[var.name])
        rows = min(int(memory_cap * CAP_SHARE) // cost, max(var.shape[0], MIN_BLOCK_ROWS))
        if rows < MIN_BLOCK_ROWS:
            raise ReshardError(
                f"memory cap {memory_cap} bytes cannot hold a block of {MIN_BLOCK_ROWS} rows of "
                f"variable {var.name!r} ({var.shape[1]} columns of {dtypes[var.name]}, "
                f"{cost} bytes a row with its reads and indices): give at least "
                f"{math.ceil(cost * MIN_BLOCK_ROWS / CAP_SHARE)} bytes", variable=var.name)
        sizes[var.name] = rows
    stats = ReshardStats()
    for var in plan.variables:
        dtype = dtypes[var.name]
        blocks = _blocks(var, source, dtype, sizes[var.name], stats, progress)
        sink.add_rows(var.name, var.shape, dtype, blocks)
        stats.variables += 1
    return stats


def _blocks(var: NewVariable, source: RowSource, dtype: np.dtype[Any], block_rows: int,
            stats: ReshardStats, progress: Callable[[str, int, int], None] | None
            ) -> Iterator[np.ndarray]:
    total, width = var.shape
    amp = max((_amplification(var, s) for s in var.sources), default=1)
    for start in range(0, total, block_rows):
        stop = min(start + block_rows, total)
        if var.copy_of is not None:
            out = np.asarray(source.read_rows(var.copy_of, start, stop), dtype=dtype)
            stats.read_calls += 1
            stats.bytes_read += out.nbytes
        else:
            out = np.zeros((stop - start, width), dtype=dtype)
            rows = np.arange(start, stop, dtype=np.int64)
            if var.layouts:
                which, table_row = table_rows(var.layouts, rows)
            else:
                which, table_row = np.zeros(len(rows), dtype=np.int64), rows
            # the block's rows grouped by table: one pass, then only the tables present
            by_table = np.argsort(which, kind="stable")
            counts = np.bincount(which, minlength=len(var.sources))
            starts = np.cumsum(counts) - counts
            for k in np.flatnonzero(counts):
                src = var.sources[k]
                dest = by_table[starts[k]:starts[k] + counts[k]]
                dest = dest[table_row[dest] < src.rows]
                if not dest.size:
                    continue
                wanted = table_row[dest]
                at = wanted if src.layout is None else shard_rows(src.layout, wanted)
                _gather(source, src.variable, at, dest, out, src.cols, (amp, block_rows * amp),
                        stats)
        stats.blocks += 1
        stats.block_rows = max(stats.block_rows, stop - start)
        stats.rows_written += stop - start
        stats.bytes_written += out.nbytes
        yield out
        if progress is not None:
            progress(var.name, stop, total)


def _gather(source: RowSource, name: str, at: np.ndarray, dest: np.ndarray, out: np.ndarray,
            cols: int, runs: tuple[int, int], stats: ReshardStats) -> None:
    """``out[dest, :cols] = OLD[at, :cols]``, reading ``name`` in sorted runs: a new run starts
    where the next row is more than ``gap`` rows on, or would make the run longer than ``span``
    rows (``runs``: gap, span). The Python loop is over runs (a few per OLD shard and table),
    never over rows."""
    gap, span = runs
    order = np.argsort(at, kind="stable")
    at, dest = at[order], dest[order]
    breaks = np.flatnonzero(np.diff(at) > gap) + 1
    bounds = np.concatenate(([0], breaks, [len(at)]))
    for first, end in zip(bounds[:-1], bounds[1:], strict=True):
        pos = int(first)
        while pos < end:
            low = int(at[pos])
            stop = pos + int(np.searchsorted(at[pos:end], low + span, side="left"))
            high = int(at[stop - 1]) + 1
            chunk = source.read_rows(name, low, high)
            if chunk.shape[0] != high - low:
                raise ReshardError(f"variable {name!r}: rows {low}..{high} gave "
                                   f"{chunk.shape[0]} rows", variable=name)
            stats.read_calls += 1
            stats.bytes_read += chunk.nbytes
            out[dest[pos:stop], :cols] = chunk[at[pos:stop] - low, :cols]
            pos = stop


def reshard_arrays(plan: ReshardPlan, arrays: Mapping[str, np.ndarray], *,
                   memory_cap: int = 1 << 40) -> dict[str, np.ndarray]:
    """:func:`execute_reshard` in memory: OLD's variables by local name -> NEW's."""
    sink = ArraySink()
    execute_reshard(plan, ArraySource(arrays), sink, memory_cap=memory_cap)
    return sink.arrays

"""TensorFlow's SparseCore layout arithmetic on arrays: where each row of a table lives in a
stacked variable, and the whole-array unshard / shard ``TPUEmbeddingV2``'s checkpoint adapter
runs (TensorFlow 2.21, ``tensorflow/python/tpu/``).

A stack of tables on N SparseCores is one variable of ``N x R`` rows (R =
``total_rows_per_sparse_core_shard``) and the stack's padded width: SparseCore shard ``s`` is
rows ``s*R .. s*R + R - 1``. Each table (layout: padded rows P, a multiple of N; row offset
``o``; rotation ``q``) holds ``P / N`` rows of every shard, from row ``o`` of the shard on.
Padded table row ``j`` lives on shard ``(j mod N + q) mod N`` at row ``o + j div N`` of the
shard (``tpu_embedding_v3_utils.map_indices_in_shard``); conversely row ``o + i`` of shard
``s`` holds padded table row ``i*N + (s - q) mod N``. Rows ``j`` at or past the table's
vocabulary and columns at or past its ``dim`` are padding.

- :func:`unshard` is ``tpu_embedding_v3_checkpoint_adapter._unshard_from_sc_to_cpu``: per table
  ``tpu_embedding_v3_utils.unshuffle_from_sc_to_cpu`` (reshape to ``(N, R, width)``, the table's
  rows ``o .. o + P/N`` of each shard, rolled by ``-q`` over the shards, transposed and
  flattened) then ``remove_padding_from_sc`` (the first ``unsharded_shape`` rows and columns);
- :func:`shard` is ``_shard_from_cpu_to_sc`` for the whole variable: each table zero-padded to
  its ``unsharded_padded_shape`` (``array_ops.pad``), then per shard ``s`` the concatenation, in
  row-offset order, of each table's padded rows ``(s + N - q) mod N :: N``. TensorFlow builds
  the variable a partition (``N / num_partitions`` shards) at a time; the concatenation of the
  partitions is this array.

:func:`check_stack` refuses layouts these formulas cannot serve (TensorFlow would slice past a
shard, pad by a negative amount, or concatenate tables of other widths) with an error naming
the table. :func:`shard_rows` and :func:`table_rows` are the two directions of the row map, on
index arrays, for the streaming reshard (:mod:`tpuemb_cfg.checkpoints.reshard`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.model.checkpoint import LayoutRecord, layouts_from_proto

if TYPE_CHECKING:
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

__all__ = ["LayoutError", "as_records", "by_offset", "check_stack", "shard", "shard_rows",
           "stack_shape", "stacks_of", "table_rows", "unshard"]


class LayoutError(InputError):
    """Layouts that disagree with each other or with an array: the message names the table (or
    the variable) and the numbers that do not fit."""

    def __init__(self, message: str, *, table: str | None = None,
                 variable: str | None = None) -> None:
        super().__init__(message, key=variable)
        self.table = table
        self.variable = variable


def as_records(layouts: SparseCoreTableLayouts | Sequence[LayoutRecord]
               ) -> tuple[LayoutRecord, ...]:
    """``LayoutRecord``\\ s of a ``SparseCoreTableLayouts`` message (what a checkpoint stores
    under ``_sparse_core_table_layouts``) or of records, in table-name order."""
    if hasattr(layouts, "tables"):
        return layouts_from_proto(layouts)  # type: ignore[arg-type]
    records = tuple(layouts)
    for r in records:
        if not isinstance(r, LayoutRecord):
            raise LayoutError(f"a layout must be a LayoutRecord or a SparseCoreTableLayouts "
                              f"message; found {type(r).__name__}")
    return tuple(sorted(records, key=lambda r: r.table_name))


def by_offset(layouts: Sequence[LayoutRecord]) -> tuple[LayoutRecord, ...]:
    """A stack's layouts in row-offset order (``_reorg_layouts``)."""
    return tuple(sorted(layouts, key=lambda r: r.sparse_core_shard_row_offset))


def stacks_of(layouts: Sequence[LayoutRecord]) -> dict[str, tuple[LayoutRecord, ...]]:
    """Stack name -> its tables' layouts by row offset, stacks in name order; each stack
    checked (:func:`check_stack`) and every table name once."""
    seen: set[str] = set()
    out: dict[str, list[LayoutRecord]] = {}
    for r in layouts:
        if r.table_name in seen:
            raise LayoutError(f"table {r.table_name!r} has two layouts", table=r.table_name)
        seen.add(r.table_name)
        out.setdefault(r.stacked_table_name, []).append(r)
    stacks = {name: by_offset(out[name]) for name in sorted(out)}
    for members in stacks.values():
        check_stack(members)
    return stacks


def _where(r: LayoutRecord) -> str:
    return f"table {r.table_name!r} (stack {r.stacked_table_name!r})"


def check_stack(layouts: Sequence[LayoutRecord]) -> None:
    """The layouts of one stack describe a variable the formulas serve: every table on the same
    N SparseCores (N at least 1, a multiple of ``num_partitions`` unless that is 0, as in
    jax-tpu-embedding's layouts), the same R rows per shard
    and padded width; its shapes positive, the padded no smaller, padded rows a multiple of N;
    the tables' ``P / N`` rows tiling each shard from row 0 to R in row-offset order (what
    ``_shard_from_cpu_to_sc``'s concatenation assumes and the stacker writes)."""
    ordered = by_offset(layouts)
    first = ordered[0]
    end = 0
    for r in ordered:
        where = _where(r)
        n = r.num_sparse_cores
        # 0 partitions: not recorded (jax-tpu-embedding's spec has no such number)
        if n < 1 or r.num_partitions < 0 or (r.num_partitions and n % r.num_partitions):
            raise LayoutError(f"{where}: {n} SparseCores on {r.num_partitions} partitions: "
                              "SparseCores at least 1 and a multiple of the partitions (0: not "
                              "recorded)", table=r.table_name)
        for field in ("num_sparse_cores", "num_partitions", "total_rows_per_sparse_core_shard"):
            if getattr(r, field) != getattr(first, field):
                raise LayoutError(f"{where}: {field} {getattr(r, field)}, where table "
                                  f"{first.table_name!r} of the same stack has "
                                  f"{getattr(first, field)}", table=r.table_name)
        if r.unsharded_padded_shape[1] != first.unsharded_padded_shape[1]:
            raise LayoutError(f"{where}: padded width {r.unsharded_padded_shape[1]}, where table "
                              f"{first.table_name!r} of the same stack has "
                              f"{first.unsharded_padded_shape[1]}", table=r.table_name)
        (rows, dim), (prows, pdim) = r.unsharded_shape, r.unsharded_padded_shape
        if min(rows, dim) < 1 or prows < rows or pdim < dim:
            raise LayoutError(f"{where}: unsharded_shape {[rows, dim]} and unsharded_padded_shape "
                              f"{[prows, pdim]}: both positive, the padded no smaller",
                              table=r.table_name)
        if prows % n:
            raise LayoutError(f"{where}: {prows} padded rows are not a multiple of its {n} "
                              "SparseCores", table=r.table_name)
        if r.sparse_core_shard_row_offset != end:
            raise LayoutError(f"{where}: row offset {r.sparse_core_shard_row_offset} in each "
                              f"shard, where the tables before it end at row {end}",
                              table=r.table_name)
        end += prows // n
    if end != first.total_rows_per_sparse_core_shard:
        raise LayoutError(f"stack {first.stacked_table_name!r}: its tables fill {end} rows of each "
                          f"SparseCore shard; total_rows_per_sparse_core_shard is "
                          f"{first.total_rows_per_sparse_core_shard}", table=ordered[-1].table_name)


def stack_shape(layouts: Sequence[LayoutRecord]) -> tuple[int, int]:
    """The stacked variable's shape: ``(N x R, padded width)`` (what
    ``EmbeddingReshardCallback.update_restore_inputs`` reads)."""
    first = layouts[0]
    return (first.num_sparse_cores * first.total_rows_per_sparse_core_shard,
            first.unsharded_padded_shape[1])


def shard_rows(layout: LayoutRecord, rows: np.ndarray) -> np.ndarray:
    """The stacked variable's row of each padded table row ``j`` (int64):
    ``((j mod N + q) mod N) x R + o + j div N``."""
    n = layout.num_sparse_cores
    shard_index = (rows % n + layout.sparse_core_shard_rotation) % n
    out: np.ndarray = (shard_index * layout.total_rows_per_sparse_core_shard
                       + layout.sparse_core_shard_row_offset + rows // n)
    return out


def table_rows(layouts: Sequence[LayoutRecord], rows: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """For stacked rows ``g`` of a checked stack (``layouts`` by row offset): the index of the
    table holding each and its padded table row ``i x N + (s - q) mod N`` (s = g div R,
    o + i = g mod R)."""
    first = layouts[0]
    n, per_shard = first.num_sparse_cores, first.total_rows_per_sparse_core_shard
    offsets = np.array([r.sparse_core_shard_row_offset for r in layouts], dtype=np.int64)
    rotations = np.array([r.sparse_core_shard_rotation for r in layouts], dtype=np.int64)
    shard_index, in_shard = np.divmod(rows, per_shard)
    which = np.searchsorted(offsets, in_shard, side="right") - 1
    return which, (in_shard - offsets[which]) * n + (shard_index - rotations[which]) % n


def unshard(stacked: np.ndarray, layouts: Sequence[LayoutRecord]) -> list[np.ndarray]:
    """``_unshard_from_sc_to_cpu``: each table of ``layouts`` (in the order given) out of the
    whole stacked variable, its padding removed. TensorFlow checks only that the rows divide by
    N; this refuses any array of another shape than the layouts' (:func:`stack_shape`)."""
    check_stack(layouts)
    expected = stack_shape(layouts)
    if stacked.ndim != 2 or stacked.shape != expected:
        raise LayoutError(f"stack {layouts[0].stacked_table_name!r} is {list(stacked.shape)}; its "
                          f"layouts say {list(expected)}", table=layouts[0].table_name)
    out = []
    for r in layouts:
        n, width = r.num_sparse_cores, stacked.shape[1]
        size = r.unsharded_padded_shape[0] // n
        offset = r.sparse_core_shard_row_offset
        shards = stacked.reshape(n, -1, width)[:, offset:offset + size]
        shards = np.roll(shards, -r.sparse_core_shard_rotation, axis=0)
        padded = shards.transpose(1, 0, 2).reshape(size * n, width)
        rows, dim = r.unsharded_shape
        out.append(np.ascontiguousarray(padded[:rows, :dim]))
    return out


def shard(tables: Mapping[str, np.ndarray], layouts: Sequence[LayoutRecord]) -> np.ndarray:
    """``_shard_from_cpu_to_sc`` of a whole stacked variable: the tables of ``layouts`` (by
    name; each of its layout's ``unsharded_shape``: TensorFlow pads by the layout's shapes and
    fails or misplaces rows otherwise) zero-padded and spread over the shards."""
    ordered = by_offset(layouts)
    check_stack(ordered)
    parts = []
    for r in ordered:
        value = tables[r.table_name]
        if value.ndim != 2 or tuple(value.shape) != tuple(r.unsharded_shape):
            raise LayoutError(f"table {r.table_name!r} is {list(value.shape)}; its layout says "
                              f"{list(r.unsharded_shape)}", table=r.table_name)
        n = r.num_sparse_cores
        (rows, dim), (prows, pdim) = r.unsharded_shape, r.unsharded_padded_shape
        padded = np.zeros((prows, pdim), dtype=value.dtype)
        padded[:rows, :dim] = value
        # shard s takes padded rows (s - q) mod N :: N: the (P/N, N) view transposed, rolled by q
        per_shard = np.roll(padded.reshape(prows // n, n, pdim).transpose(1, 0, 2),
                            r.sparse_core_shard_rotation, axis=0)
        parts.append(per_shard)
    stacked: np.ndarray = np.concatenate(parts, axis=1).reshape(stack_shape(ordered))
    return stacked

"""The rows a run touched, and the partial state file of them (format: ``partial``).

:class:`TouchedRows` keeps, per table, a bitmap of the rows a run's updates touched (the
``unique_ids`` of each step's record; every row once a non-lazy optimizer stepped); the run
stores it in its checkpoints. :func:`touched_state` makes the arrays of a partial file from an
executor's live tables without copying them whole (:class:`RowsOf` streams the rows into the
file a block at a time).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from .checkpoint import damaged_checkpoint
from .partial import rows_key, values_key
from .plan import Plan, TablePlan
from .state import slot_key, table_key
from .storage import LocalStorage

if TYPE_CHECKING:
    from .core import Executor
    from .records import DeduplicationData

__all__ = ["TABLE_OUTPUTS", "RowsOf", "TouchedRows", "saved_state", "touched_state"]

F32 = np.float32
_BIT = np.array([1 << k for k in range(8)], dtype=np.uint8)
#: Rows per block when a partial table is streamed.
_BLOCK_BYTES = 16 << 20

class TouchedRows:
    """Per table of ``plan``, the rows a run's updates touched (a bitmap: an eighth of a byte a
    row). ``add(dedup)`` after each update; ``rows(table)`` the sorted ids."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._bits = {t.name: np.zeros((t.vocabulary + 7) // 8, dtype=np.uint8)
                      for t in plan.tables}
        self._lazy = {t.name: t.lazy for t in plan.tables}

    def add(self, dedup: DeduplicationData) -> None:
        """The rows one step updated (nothing in mode INFERENCE, whose tables never change)."""
        if not self.plan.updates:
            return
        for table in self.plan.tables:
            self.add_rows(table.name, dedup.tables[table.name].unique_ids)

    def add_rows(self, table: str, rows: np.ndarray | None) -> None:
        """Mark ``rows`` (distinct int64 ids; None: every row) of ``table`` touched: every row
        when the table's optimizer is not lazy (it steps them all)."""
        if rows is None or not self._lazy[table]:
            self._bits[table].fill(0xFF)
            return
        ids = np.asarray(rows, dtype=np.int64)
        np.bitwise_or.at(self._bits[table], ids >> 3, _BIT[ids & 7])

    def rows(self, table: TablePlan) -> np.ndarray:
        """The touched rows of ``table``, increasing (int64)."""
        bits = np.unpackbits(self._bits[table.name], count=table.vocabulary, bitorder="little")
        return np.flatnonzero(bits).astype(np.int64)

    def count(self, table: TablePlan) -> int:
        return int(np.unpackbits(self._bits[table.name], count=table.vocabulary,
                                 bitorder="little").sum())

    def arrays(self) -> dict[str, np.ndarray]:
        """The bitmaps, for a checkpoint (``run/touched/{table}``)."""
        return {f"run/touched/{name}": bits for name, bits in self._bits.items()}

    def restore(self, arrays: Mapping[str, Any], source: str | None) -> None:
        """The bitmaps of a checkpoint's ``arrays()``; a checkpoint without them (written before
        they were kept) counts every row as touched. ``InputError`` for one of the wrong shape."""
        for table in self.plan.tables:
            key = f"run/touched/{table.name}"
            value = arrays.get(key)
            if value is None:
                self._bits[table.name].fill(0xFF)
                continue
            bits = np.asarray(value)
            if bits.dtype != np.uint8 or bits.shape != self._bits[table.name].shape:
                raise damaged_checkpoint(source, key, f"{bits.dtype} of shape {bits.shape} "
                                         f"found, expected uint8 {self._bits[table.name].shape}")
            self._bits[table.name][...] = bits


class RowsOf:
    """``array[rows]`` (float32 [len(rows), D]) without the copy: ``npy_chunks()`` yields it a
    block of rows at a time (how ``npzio.write_npz`` writes it), ``np.asarray`` gathers it whole.
    ``array`` is a live table or slot, or an array-like with ``take(rows)`` (the Ray backend's
    ``ShardedArray``)."""

    dtype = np.dtype(F32)
    ndim = 2

    def __init__(self, array: Any, rows: np.ndarray) -> None:
        self._array = array
        self._rows = rows
        self.shape = (int(rows.shape[0]), int(array.shape[1]))

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 4

    def _take(self, rows: np.ndarray) -> np.ndarray:
        if isinstance(self._array, np.ndarray):
            return np.take(self._array, rows, axis=0)
        taken: np.ndarray = self._array.take(rows)
        return taken

    def npy_chunks(self) -> Iterator[np.ndarray]:
        block = max(1, _BLOCK_BYTES // max(self.shape[1] * 4, 1))
        for start in range(0, self.shape[0], block):
            yield self._take(self._rows[start:start + block])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._take(self._rows) if self.shape[0] else np.zeros(self.shape, dtype=F32)
        return out if dtype is None else out.astype(dtype, copy=False)


def touched_state(executor: Executor, touched: TouchedRows) -> dict[str, Any]:
    """The partial state file of ``executor``'s tables: per table its touched rows and their
    values in the table and every slot (module docstring), the values as :class:`RowsOf` of the
    live arrays (nothing is copied whole, and no untouched default row is computed)."""
    storage = executor.storage
    out: dict[str, Any] = {}
    remote = None if isinstance(storage, LocalStorage) else storage.arrays()
    for table in executor.plan.tables:
        rows = touched.rows(table)
        keys = [table_key(table.name), *(slot_key(table.name, s) for s in table.slot_names)]
        if remote is None:
            assert isinstance(storage, LocalStorage)
            params, slots = storage.local(table.name, rows)
            live = [params, *slots]
        else:
            live = [remote[key] for key in keys]
        out[rows_key(table.name)] = rows
        for key, array in zip(keys, live, strict=True):
            out[values_key(key)] = RowsOf(array, rows)
    return out


#: What a run writes of its tables (``tpuemb simulate --tables``).
TABLE_OUTPUTS = ("all", "touched", "none")


def saved_state(executor: Executor, touched: TouchedRows, which: str) -> dict[str, Any]:
    """The arrays of a run's ``tables.npz`` for ``which``: ``all``, every table and slot (the
    live arrays, every default row computed); ``touched``, :func:`touched_state`; ``none``,
    nothing. ``UsageError`` for another value."""
    if which == "all":
        return executor.state_arrays()
    if which == "touched":
        return touched_state(executor, touched)
    if which == "none":
        return {}

    raise UsageError(f"unknown tables output {which!r}; expected one of "
                     + ", ".join(TABLE_OUTPUTS))

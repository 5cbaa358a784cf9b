"""Partial state files: the rows a run changed, with every other row left to the seed.

A synthetic run changes only the rows its steps look up (every row for a non-lazy optimizer),
and every other row still holds its default value, which depends only on the seed, the table
and the row (``counter``, ``state``). So the rows a run touched and their values, plus the seed,
are the whole state; writing only them (``tpuemb simulate --tables touched``) is what makes a
large run's output small. The format extends the state-file keys of the replay contract
(``table/{table}``, ``slot/{table}/{slot}``, float32 ``[vocabulary_size, dimension]``) and is
read wherever those are (``tpuemb simulate --batches ... --init I.npz``, ``Executor(
initial_state=...)``, ``replay(init=...)``):

| key | dtype, shape | meaning |
|---|---|---|
| ``table/{table}/rows`` | int64 [n] | the rows given: distinct, increasing, < vocabulary |
| ``table/{table}/values`` | float32 [n, dimension] | the table's values of those rows |
| ``slot/{table}/{slot}/values`` | float32 [n, dimension] | the slot's values of those rows |

Every row not listed, and every array whose values are not given, gets its default (the
truncated normal of the seed, the slot's initial value). A table is given whole or in part, not
both (``table/{table}`` with ``table/{table}/values`` is an error, and so is a slot's); the
``values`` keys need the table's ``rows``. Files mixing whole and partial tables are fine.

Writing them: ``touched``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

from .plan import Plan, TablePlan
from .state import Pending, initial_slot_rows, initial_table_rows, slot_key, table_key

__all__ = [
    "PartialTable",
    "apply_partial",
    "expand_partial",
    "split_partial",
]

F32 = np.float32


def rows_key(table: str) -> str:
    return f"table/{table}/rows"


def values_key(key: str) -> str:
    """``table/T/values`` or ``slot/T/S/values``: the partial values of the array ``key``."""
    return f"{key}/values"


@dataclass
class PartialTable:
    """A table given in part: ``rows`` (sorted distinct int64) and, by state-file key of the
    whole array (``table/T``, ``slot/T/S``), the values of those rows."""

    table: TablePlan
    rows: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)


def split_partial(
    plan: Plan, given: Mapping[str, Any], source: str | None = None, strict: bool = False,
) -> tuple[dict[str, Any], dict[str, PartialTable]]:
    """``given`` without its partial keys, and the partial tables they describe (by table name),
    checked: ``InputError`` naming ``source`` and the key for rows that are not distinct
    increasing ids of the table, values of the wrong dtype (``strict``: only float32) or shape,
    values without rows, or an array given both whole and in part. Other keys are left for
    ``state.check_given``."""
    partial_keys: dict[str, tuple[TablePlan, str | None]] = {}
    for table in plan.tables:
        partial_keys[rows_key(table.name)] = (table, None)
        arrays = [table_key(table.name), *(slot_key(table.name, s) for s in table.slot_names)]
        for whole in arrays:
            partial_keys[values_key(whole)] = (table, whole)
    whole_keys = {table_key(t.name) for t in plan.tables} | {
        slot_key(t.name, s) for t in plan.tables for s in t.slot_names}
    rest: dict[str, Any] = {}
    found: dict[str, PartialTable] = {}
    values: list[tuple[str, TablePlan, str]] = []
    for key, value in given.items():
        if key in whole_keys or key not in partial_keys:
            rest[key] = value
            continue
        table, of = partial_keys[key]
        if of is None:
            found[table.name] = PartialTable(table, _checked_rows(table, value, source, key))
        else:
            values.append((key, table, of))
    for key, table, whole in values:
        part = found.get(table.name)
        if part is None:
            raise InputError(f"partial values need the rows they belong to: add "
                             f"{rows_key(table.name)} (int64 row ids) or give the whole array as "
                             f"{whole}", path=source, key=key)
        if whole in given:
            raise InputError(f"{whole} is given whole and in part ({key}); keep one of the two",
                             path=source, key=key)
        part.values[whole] = _checked_values(table, given[key], part.rows.shape[0], source, key,
                                             strict)
    return rest, found


def _checked_rows(table: TablePlan, value: Any, source: str | None, key: str) -> np.ndarray:
    rows = np.asarray(value)
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        raise InputError(f"{rows.dtype} of shape {rows.shape} found, expected a 1-D array of "
                         "integer row ids", path=source, key=key)
    rows = rows.astype(np.int64)
    if rows.size and (int(rows[0]) < 0 or int(rows[-1]) >= table.vocabulary
                      or bool((rows[1:] <= rows[:-1]).any())):
        raise InputError(f"row ids must be distinct, increasing and in [0, {table.vocabulary}) "
                         f"(vocabulary_size of table {table.name!r}); sort them with np.unique",
                         path=source, key=key)
    return rows


def _checked_values(table: TablePlan, value: Any, count: int, source: str | None, key: str,
                    strict: bool) -> np.ndarray:
    dtype = np.dtype(value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype)
    if dtype != F32 and (strict or dtype.kind not in "fiu"):
        raise InputError(f"dtype {dtype} found, expected float32; cast with .astype(np.float32)",
                         path=source, key=key)
    expected = (count, table.dimension)
    shape = tuple(getattr(value, "shape", np.shape(value)))
    if shape != expected:
        raise InputError(f"shape {shape} found, expected {expected} ([len(rows), dimension])",
                         path=source, key=key)
    return np.asarray(value, dtype=F32)


def apply_partial(part: PartialTable, arrays: Mapping[str, np.ndarray],
                  pending: Pending | None) -> bool:
    """Write the given rows of ``part`` into the table's ``arrays`` (state-file keys, as
    ``initial.initial_state`` builds them): the rows' pending defaults are computed first
    (``pending``, when the arrays are lazy) so that every array holds its values there, then the
    given values replace them. Returns True when no row of the table is pending any more."""
    table = part.table
    params = arrays[table_key(table.name)]
    slots = tuple(arrays[slot_key(table.name, s)] for s in table.slot_names)
    done = False
    if pending is not None and part.rows.size:
        done = pending.materialize(params, slots, part.rows)
    for key, values in part.values.items():
        arrays[key][part.rows] = values
    return done


class _Expanded:
    """A whole array of a partial table, as an array-like: rows ``[start:stop]`` (a slice of
    rows) are computed on demand from the seed's defaults with the given rows over them, so a
    storage that sends tables in blocks (the Ray backend) never holds the whole array."""

    dtype = np.dtype(F32)
    ndim = 2

    def __init__(self, part: PartialTable, key: str, seed: int) -> None:
        self._part = part
        self._key = key
        self._seed = seed
        self.shape = (part.table.vocabulary, part.table.dimension)

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, step = index.indices(self.shape[0])
        ids = np.arange(start, stop, step, dtype=np.int64)
        table = self._part.table
        if self._key == table_key(table.name):
            block = initial_table_rows(table, self._seed, ids)
        else:
            block = initial_slot_rows(table, self._key.rsplit("/", 1)[1], ids)
        values = self._part.values.get(self._key)
        if values is not None and ids.size:
            rows = self._part.rows
            position = np.minimum(np.searchsorted(rows, ids), max(rows.size - 1, 0))
            hit = rows[position] == ids if rows.size else np.zeros(ids.size, dtype=bool)
            block[hit] = values[position[hit]]
        return block

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[0:self.shape[0]]
        return out if dtype is None else out.astype(dtype, copy=False)


def expand_partial(plan: Plan, given: Mapping[str, Any], seed: int, source: str | None = None,
                   strict: bool = False) -> dict[str, Any]:
    """``given`` with every partial table (and each array of it) made whole: array-likes whose
    row blocks are computed when read (the seed's defaults, the given rows over them). For a
    storage that reads whole arrays by blocks of rows (``backends.ray.storage``)."""
    rest, partial = split_partial(plan, given, source, strict)
    for part in partial.values():
        table = part.table
        for key in (table_key(table.name), *(slot_key(table.name, s) for s in table.slot_names)):
            if key not in rest:
                rest[key] = _Expanded(part, key, seed)
    return rest

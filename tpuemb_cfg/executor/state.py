"""Tables and slots: the initial state (given or default, spec section 11) and its npz key names.

Default values are counter-based (``counter``): element (r, c) of a table depends only on the
seed, the table's index, r and c, so ``initial_table_rows`` gives any subset of rows (a shard, a
row first touched) exactly as the whole table has them, and whole tables initialise in parallel
(with numba: about 1 GB of tables and slots a second per core).

State-file keys (replay contract): ``table/{table}`` and ``slot/{table}/{slot}``, float32
[vocabulary_size, dimension].
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

from .aligned import aligned_empty
from .counter import normal_rows
from .initializers import table_rows
from .plan import Plan, TablePlan

__all__ = [
    "Pending",
    "check_given",
    "default_slot",
    "default_table",
    "initial_slot_rows",
    "initial_table_rows",
    "slot_key",
    "table_key",
]

F32 = np.float32

# Rows per block of the NumPy fallback (bounds its temporaries: about 100 bytes per element).
_NUMPY_BLOCK_ELEMENTS = 1 << 20
_SMALL = 1 << 12


def table_key(table: str) -> str:
    return f"table/{table}"


def slot_key(table: str, slot: str) -> str:
    return f"slot/{table}/{slot}"


def _compiled(elements: int) -> Any:
    """``engines.numba_init`` when numba can be imported, else None (NumPy computes the same
    bits, slower). For a few elements NumPy too: unless numba is loaded already and there are
    more than a small table's, importing it or loading its kernels costs more than the work
    (a new process's first small step would pay that)."""
    if elements < (_SMALL if "numba" in sys.modules else _NUMPY_BLOCK_ELEMENTS):
        return None
    try:
        from .engines import numba_init
    except ImportError:  # numba missing or NUMBA_DISABLE_JIT set (base.jit_availability)
        return None
    return numba_init


def _stddev(table: TablePlan) -> float:
    return 1.0 / math.sqrt(table.dimension)


def _fill_table(
    table: TablePlan, seed: int, rows: np.ndarray | None, out: np.ndarray, at: bool = False
) -> None:
    """Write the initial values of ``rows`` (None: rows 0..len(out)-1) of ``table`` into ``out``
    (``at``: into those rows of ``out``, a whole table; else into out[0], out[1], ...): the
    spec's initializer (``table.initializer``, ``executor.initializers``), else the defaults of
    spec section 11. A truncated normal of mean 0 (the default's kind) runs compiled."""
    init = table.initializer
    initial_from = table.optimizer.algorithm.initial_rows_from
    if init is None and initial_from is not None:
        # The rows start at a hyper-parameter (the frequency estimate D at its cap, spec 11).
        _fill(out, F32(getattr(table.hyper, initial_from)), rows if at else None)
        return
    if init is not None and init.kind == "constant":
        _fill(out, F32(init.value), rows if at else None)
        return
    normal = init is None or (init.kind == "truncated_normal" and init.mean == 0.0)
    stddev = _stddev(table) if init is None else init.stddev
    if normal and init is not None and init.seed is not None:
        seed = init.seed  # the initializer's own seed (``table_rows`` does the same)
    count = out.shape[0] if rows is None else rows.shape[0]
    compiled = _compiled(count * table.dimension) if normal else None
    if compiled is not None:
        if rows is None:
            compiled.fill_normal_range(seed, table.index, 0, out, stddev)
        elif at:
            compiled.fill_normal_at(seed, table.index, rows, out, stddev)
        else:
            compiled.fill_normal_rows(seed, table.index, rows, out, stddev)
        return
    block = max(1, _NUMPY_BLOCK_ELEMENTS // table.dimension)
    for start in range(0, count, block):
        stop = min(start + block, count)
        ids = np.arange(start, stop, dtype=np.int64) if rows is None else rows[start:stop]
        values = (normal_rows(seed, table.index, ids, table.dimension, stddev)
                  if normal or init is None
                  else table_rows(init, seed, table.index, ids, table.dimension))
        if at:
            out[ids] = values
        else:
            out[start:stop] = values


def _fill(out: np.ndarray, value: np.float32, rows: np.ndarray | None = None) -> None:
    """``out[:] = value`` (``rows``: ``out[rows] = value``)."""
    count = out.shape[0] if rows is None else rows.shape[0]
    compiled = _compiled(count * out.shape[1])
    if compiled is not None:
        compiled.fill_rows(out, value, rows)  # first touch of the pages on every thread
    elif rows is None:
        out.fill(value)
    else:
        out[rows] = value


def initial_table_rows(table: TablePlan, seed: int, rows: np.ndarray) -> np.ndarray:
    """float32 ``[len(rows), dimension]``: the default initial values of ``rows`` of ``table``.

    The spec's initializer (``table.initializer``, ``executor.initializers``), else spec
    section 11: truncated normal, mean 0, standard deviation 1/sqrt(D), within two standard
    deviations; a ``frequency_estimator`` table starts at ``max_delta``. Row r's values are a
    function of (``seed``, ``table.index``, r) only (``counter``: SplitMix64 and a ziggurat),
    so any sharding's rows concatenate to the whole table bit for bit, whatever the order of
    ``rows`` and whichever engine computes them. ``rows``: int64 ids in [0, vocabulary).
    """
    ids = np.ascontiguousarray(np.asarray(rows, dtype=np.int64).reshape(-1))
    out = np.empty((ids.shape[0], table.dimension), dtype=F32)
    _fill_table(table, seed, ids, out)
    return out


def initial_slot_rows(table: TablePlan, slot: int | str, rows: np.ndarray) -> np.ndarray:
    """float32 ``[len(rows), dimension]``: the default value of slot ``slot`` (its index in state
    order, or its name) of ``table`` in every row (spec sections 11 and 13)."""
    index = table.slot_names.index(slot) if isinstance(slot, str) else int(slot)
    out = np.empty((np.asarray(rows).reshape(-1).shape[0], table.dimension), dtype=F32)
    _fill(out, table.slot_defaults[index])
    return out


def default_table(table: TablePlan, seed: int) -> np.ndarray:
    out = aligned_empty((table.vocabulary, table.dimension))
    _fill_table(table, seed, None, out)
    return out


def default_slot(table: TablePlan, slot: int) -> np.ndarray:
    out = aligned_empty((table.vocabulary, table.dimension))
    _fill(out, table.slot_defaults[slot])
    return out


_BIT = np.array([1 << k for k in range(8)], dtype=np.uint8)  # bit k of a byte


@dataclass
class Pending:
    """The default rows of one table not computed yet (``initial_state(lazy=True)``).

    ``params`` / ``slots``: which of the table's arrays hold defaults (the others were given);
    ``done``: a bitmap, bit ``r & 7`` of byte ``r >> 3`` set when row r of those arrays holds its
    values (``np.packbits(..., bitorder="little")``'s layout: an eighth of a byte per row, so a
    step's look-up of the rows it reads stays in the caches); ``remaining``: rows still to
    compute.
    """

    table: TablePlan
    seed: int
    params: bool
    slots: tuple[bool, ...]
    done: np.ndarray
    remaining: int

    def materialize(
        self, params: np.ndarray, slots: tuple[np.ndarray, ...], rows: np.ndarray | None
    ) -> bool:
        """Compute the pending default values of ``rows`` (sorted distinct ids; None: every
        row) into the arrays, in place; return True once no row is pending."""
        if rows is None:
            missing = None if self.remaining == self.table.vocabulary else (
                np.flatnonzero(np.unpackbits(self.done, count=self.table.vocabulary,
                                             bitorder="little") == 0)
            )
        else:
            missing = rows[~self.holds(rows)]
            if not missing.size:
                return False
        table = self.table
        if self.params:
            _fill_table(table, self.seed, missing, params, at=True)
        for index, (slot, pending) in enumerate(zip(slots, self.slots, strict=True)):
            if pending:
                _fill(slot, table.slot_defaults[index], missing)
        if missing is None:
            self.remaining = 0
        else:
            np.bitwise_or.at(self.done, missing >> 3, _BIT[missing & 7])
            self.remaining -= int(missing.shape[0])
        return self.remaining == 0

    def holds(self, rows: np.ndarray) -> np.ndarray:
        """bool per id of ``rows`` (int64): whether that row holds its values already."""
        held: np.ndarray = (self.done[rows >> 3] & _BIT[rows & 7]) != 0
        return held

    @staticmethod
    def bitmap(vocabulary: int) -> np.ndarray:
        """An empty ``done`` bitmap for ``vocabulary`` rows."""
        return np.zeros((vocabulary + 7) // 8, dtype=np.uint8)


def _unknown_key_message(plan: Plan, key: str) -> str:
    parts = key.split("/")
    by_name = {t.name: t for t in plan.tables}
    if len(parts) == 3 and parts[0] == "slot" and parts[1] in by_name:
        table = by_name[parts[1]]
        names = ", ".join(table.slot_names) or "none"
        return (
            f"table {table.name!r} uses {table.optimizer.name}, which has no slot {parts[2]!r}; "
            f"its slots are: {names}"
        )
    tables = ", ".join(repr(t.name) for t in plan.tables)
    return (
        f"unexpected key; a state file holds table/NAME and slot/NAME/SLOT for the tables "
        f"{tables}"
    )


def check_given(plan: Plan, given: Mapping[str, Any], source: str | None, strict: bool) -> None:
    """The checks of ``initial_state`` on given arrays, without copying them: every key a known
    state-file key (all keys first), then in state order a float32 (``strict``) or numeric
    dtype and the shape [vocabulary_size, dimension]; ``InputError`` naming the key."""
    shapes = {}
    for table in plan.tables:
        shape = (table.vocabulary, table.dimension)
        shapes[table_key(table.name)] = shape
        for slot in table.slot_names:
            shapes[slot_key(table.name, slot)] = shape
    for key in given:
        if key not in shapes:
            raise InputError(_unknown_key_message(plan, key), path=source, key=key)
    for key, expected in shapes.items():
        if key not in given:
            continue
        value = given[key]
        dtype = np.dtype(value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype)
        if dtype != F32 and (strict or dtype.kind not in "fiu"):
            raise InputError(f"dtype {dtype} found, expected float32; cast with "
                             ".astype(np.float32)", path=source, key=key)
        shape = tuple(getattr(value, "shape", np.shape(value)))
        if shape != expected:
            raise InputError(f"shape {shape} found, expected {expected} ([vocabulary_size, "
                             "dimension])", path=source, key=key)

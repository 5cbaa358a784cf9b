"""Check a checkpoint's embedding against a configuration: ``tpuemb checkpoint verify``.

What it reports, per variable the configuration expects (``model.checkpoint`` views):

- **present, missing or extra**, and the **shape and dtype** found against the expected ones;
- **the layouts** (SparseCore): whether the checkpoint's ``_sparse_core_table_layouts`` equal the
  configuration's, table by table;
- **per table and state** (its parameters and each slot), by streaming the variable in blocks
  of rows (never a whole stacked variable in memory): the rows holding a NaN or an infinity,
  and the rows still exactly at their initial value (a slot's initial value - Adagrad's
  ``initial_accumulator_value``, 0 for Adam's moments - or a table's constant initializer):
  rows no training step has touched. A stacked variable's rows are split into its tables by
  the layouts (TensorFlow's arithmetic: a table's padded row ``j`` sits on SparseCore
  ``(j + rotation) mod N`` at row ``offset + j // N`` of that SparseCore's shard), padding
  rows aside;
- **the restore verdict** of ``model.checkpoint`` (what TensorFlow 2.21 does restoring this
  checkpoint under the configuration: as it is, through its reshard, or not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.algorithms.table import ALGORITHMS
from tpuemb_cfg.model.checkpoint import (
    PARAMETERS,
    CheckpointReport,
    CheckpointView,
    LayoutRecord,
    checkpoint_verdicts,
)

from .embedding import CheckpointSource, EmbeddingCheckpoint

__all__ = ["StateCheck", "VariableCheck", "VerifyReport", "table_rows", "verify"]

#: Bytes of rows read at a time while scanning a variable.
BLOCK_BYTES = 64 << 20


@dataclass(frozen=True)
class VariableCheck:
    """One variable: ``status`` ``ok``, ``missing`` (expected, not in the checkpoint),
    ``extra`` (in the checkpoint, not expected), ``shape`` or ``dtype`` (found but different)."""

    name: str
    status: str
    expected_shape: tuple[int, ...] | None
    found_shape: tuple[int, ...] | None
    dtype: str | None


@dataclass(frozen=True)
class StateCheck:
    """One table's state in one variable: ``rows`` (real, unpadded), ``nonfinite`` rows holding
    a NaN or infinity, ``initial`` rows exactly at ``initial_value`` (None: not checked)."""

    table: str
    slot: str
    variable: str
    rows: int
    nonfinite: int
    initial: int | None
    initial_value: float | None


@dataclass(frozen=True)
class VerifyReport:
    """The checks of one checkpoint against one configuration."""

    checkpoint: EmbeddingCheckpoint
    variables: tuple[VariableCheck, ...]
    layouts_differ: tuple[str, ...]
    states: tuple[StateCheck, ...]
    restore: CheckpointReport

    @property
    def ok(self) -> bool:
        """Every expected variable present with its shape, no non-finite row, and a restore
        that keeps every state."""
        return (all(v.status == "ok" for v in self.variables)
                and not any(s.nonfinite for s in self.states) and not self.restore.breaking)


def table_rows(layout: LayoutRecord) -> tuple[np.ndarray, np.ndarray]:
    """(stacked rows, table rows) of ``layout``'s real (unpadded) rows: stacked row
    ``s * R + offset + k`` holds padded table row ``((s - rotation) mod N) + k * N``
    (``tpu_embedding_v3_checkpoint_adapter._shard_from_cpu_to_sc``), for SparseCore ``s`` of
    ``N``, ``R`` rows per SparseCore, ``k`` below padded rows / N; rows past the table's
    vocabulary are padding."""
    n = layout.num_sparse_cores
    per = layout.unsharded_padded_shape[0] // n
    shard = np.arange(n, dtype=np.int64)[:, None]
    k = np.arange(per, dtype=np.int64)[None, :]
    base = shard * layout.total_rows_per_sparse_core_shard + layout.sparse_core_shard_row_offset
    stacked = base + k
    table = (shard - layout.sparse_core_shard_rotation) % n + k * n
    real = table < layout.unsharded_shape[0]
    return stacked[real], table[real]


def _scan(source: CheckpointSource, key: str, rows: np.ndarray | None, total: int,
          initial: float | None, columns: int | None = None) -> tuple[int, int | None]:
    """(non-finite rows, rows at ``initial``) among ``rows`` of variable ``key`` (all its
    ``total`` rows when None), in its first ``columns`` (the table's width; the rest is
    padding), reading blocks of consecutive rows."""
    entry = source.entry(key)
    width = int(entry.shape[1]) if len(entry.shape) > 1 else 1
    block = max(1, BLOCK_BYTES // max(1, 4 * width))
    nonfinite = 0
    at_initial = 0
    wanted = np.sort(rows) if rows is not None else None
    start = 0
    while start < total:
        stop = min(total, start + block)
        values = np.asarray(source.read_rows(key, start, stop))
        if wanted is not None:
            lo, hi = np.searchsorted(wanted, [start, stop])
            values = values[wanted[lo:hi] - start]
        values = values.reshape(values.shape[0], -1)
        if columns is not None:
            values = values[:, :columns]
        finite = np.isfinite(values).all(axis=1)
        nonfinite += int(values.shape[0] - finite.sum())
        if initial is not None:
            at_initial += int((values == np.float32(initial)).all(axis=1).sum())
        start = stop
    return nonfinite, (at_initial if initial is not None else None)


def verify(source: CheckpointSource, found: EmbeddingCheckpoint, expected: CheckpointView, *,
           initial: Mapping[tuple[str, str], float] | None = None,
           on_variable: Callable[[str], None] | None = None) -> VerifyReport:
    """Check ``found`` (``embedding.find_embedding(source)``) against ``expected`` (the view of
    the configuration: ``model.checkpoint.view_of_sparsecore`` / ``view_of_legacy``).
    ``initial``: (table, slot) -> the value an untouched row holds (``parameters`` for a
    table's constant initializer); rows at it are counted. ``on_variable``: called with each
    variable's name before it is scanned (a progress line)."""
    initial = dict(initial or {})
    checks: list[VariableCheck] = []
    for want in expected.variables:
        have = found.variable(want.name)
        if have is None:
            checks.append(VariableCheck(want.name, "missing", want.shape, None, None))
            continue
        status = ("shape" if tuple(have.shape) != tuple(want.shape)
                  else "dtype" if have.dtype != "float32" else "ok")
        checks.append(VariableCheck(want.name, status, want.shape, have.shape, have.dtype))
    names = {v.name for v in expected.variables}
    checks += [VariableCheck(v.name, "extra", None, v.shape, v.dtype)
               for v in found.variables if v.name not in names]
    mine = {t.table_name: t for t in found.layouts}
    theirs = {t.table_name: t for t in expected.layouts}
    differ = tuple(sorted(name for name in set(mine) | set(theirs)
                          if mine.get(name) != theirs.get(name)))
    states: list[StateCheck] = []
    good = {c.name for c in checks if c.status == "ok"}
    for variable in found.variables:
        if variable.name not in good:
            continue
        if on_variable is not None:
            on_variable(variable.name)
        slot = variable.slot
        if found.kind == "sparsecore":
            for layout in found.layouts:
                if layout.stacked_table_name != variable.owner:
                    continue
                stacked, _ = table_rows(layout)
                value = initial.get((layout.table_name, slot))
                bad, same = _scan(source, variable.key, stacked, variable.shape[0], value,
                                  layout.unsharded_shape[1])
                states.append(StateCheck(layout.table_name, slot, variable.name,
                                         int(stacked.shape[0]), bad, same, value))
        else:
            value = initial.get((variable.owner, slot))
            bad, same = _scan(source, variable.key, None, variable.shape[0], value)
            states.append(StateCheck(variable.owner, slot, variable.name, variable.shape[0],
                                     bad, same, value))
    restore = checkpoint_verdicts(found.view(), expected)
    return VerifyReport(found, tuple(checks), differ, tuple(states), restore)


def initial_values(tables: Any) -> dict[tuple[str, str], float]:
    """(table, slot) -> a slot's initial value for SparseCore configuration tables
    (``SparseCoreTable``: its optimizer's algorithm and hyper-parameters by the API's names),
    and (table, ``parameters``) for a table whose initializer is a constant."""
    out: dict[tuple[str, str], float] = {}
    for table in tables:
        algorithm = ALGORITHMS.get(table.optimizer.algorithm)
        for slot in algorithm.slots if algorithm is not None else ():
            value = slot.initial
            if slot.initial_from is not None:
                value = table.optimizer.hyper.get(slot.initial_from, value)
            if isinstance(value, int | float):
                out[(table.name, slot.name)] = float(value)
        constant = _constant(table.initializer)
        if constant is not None:
            out[(table.name, PARAMETERS)] = constant
    return out


def _constant(initializer: Any) -> float | None:
    """The value of a constant or zeros initializer (TensorFlow's, Keras', tpuemb's)."""
    if initializer is None:
        return None
    name = type(initializer).__name__.lower()
    if name in ("zeros", "zeros_initializer", "zerosinitializer"):
        return 0.0
    if name in ("constant", "constant_initializer", "constantinitializer"):
        value = getattr(initializer, "value", None)
        return float(value) if isinstance(value, int | float) else None
    return None

"""Check a checkpoint's embedding against a configuration: ``tpuemb checkpoint verify``.

What it reports, per variable the configuration expects (``model.checkpoint`` views):

- **present, missing or extra**, and the **shape and dtype** found against the expected ones;
- **the layouts** (SparseCore): whether the checkpoint's ``_sparse_core_table_layouts`` equal the
  configuration's, table by table;
- **per table and state** (its parameters and each slot), by streaming the variable in blocks
  of rows (never a whole stacked variable in memory): the rows holding a NaN or an infinity,
  and the rows still exactly at their initial value (a slot's initial value - Adagrad's
  ``initial_accumulator_value``, 0 for Adam's moments - or a table's constant initializer):
  rows no training step has touched. A stacked variable is read once, block by block, each
  row given to its table by the layouts (``sharding.table_rows``, TensorFlow's arithmetic),
  padding rows and columns aside;
- **the restore verdict** of ``model.checkpoint`` (what TensorFlow 2.21 does restoring this
  checkpoint under the configuration: as it is, through its reshard, or not), or for a
  jax-tpu-embedding checkpoint ``model.jax_checkpoint``'s (what Orbax's restore does).
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
from tpuemb_cfg.model.jax_checkpoint import jax_restore

from .embedding import CheckpointSource, EmbeddingCheckpoint
from .sharding import shard_rows
from .sharding import table_rows as stacked_table_rows

__all__ = ["StateCheck", "VariableCheck", "VerifyReport", "restore_verdict", "table_rows",
           "verify"]

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
    """(stacked rows, table rows) of ``layout``'s real (unpadded) rows, by stacked row: where
    ``sharding.shard_rows`` puts each table row (TensorFlow's ``_shard_from_cpu_to_sc``); rows
    past the table's vocabulary are padding and left out."""
    rows = np.arange(layout.unsharded_shape[0], dtype=np.int64)
    stacked = shard_rows(layout, rows)
    order = np.argsort(stacked, kind="stable")
    return stacked[order], rows[order]


def _scan(source: CheckpointSource, key: str, total: int, width: int,
          tables: list[tuple[LayoutRecord, float | None]] | None, initial: float | None = None,
          columns: int | None = None) -> list[tuple[int, int]]:
    """Per table of ``tables`` (a stack's layouts with each one's initial value; None: a
    per-table variable, its ``columns`` and ``initial``): (non-finite rows, rows at the initial
    value) of variable ``key``, read once in blocks of consecutive rows."""
    block = max(1, BLOCK_BYTES // max(1, 4 * width))
    if tables is None:
        layouts: list[LayoutRecord] = []
        dims = np.array([columns or width], dtype=np.int64)
        values_at = np.array([np.nan if initial is None else initial], dtype=np.float32)
    else:
        layouts = sorted((t for t, _ in tables), key=lambda t: t.sparse_core_shard_row_offset)
        by_name = {t.table_name: v for t, v in tables}
        dims = np.array([t.unsharded_shape[1] for t in layouts], dtype=np.int64)
        values_at = np.array([np.nan if by_name[t.table_name] is None
                              else by_name[t.table_name] for t in layouts], dtype=np.float32)
    vocab = np.array([t.unsharded_shape[0] for t in layouts] or [total], dtype=np.int64)
    bad = np.zeros(len(vocab), dtype=np.int64)
    same = np.zeros(len(vocab), dtype=np.int64)
    cols = np.arange(width, dtype=np.int64)[None, :]
    for start in range(0, total, block):
        stop = min(total, start + block)
        values = np.asarray(source.read_rows(key, start, stop)).reshape(stop - start, -1)
        if layouts:
            which, rows = stacked_table_rows(layouts, np.arange(start, stop, dtype=np.int64))
            real = rows < vocab[which]
            values, which = values[real], which[real]
        else:
            which = np.zeros(stop - start, dtype=np.int64)
        padding = cols[:, : values.shape[1]] >= dims[which][:, None]
        nonfinite = ~(np.isfinite(values) | padding).all(axis=1)
        bad += np.bincount(which[nonfinite], minlength=len(vocab))
        at = ((values == values_at[which][:, None]) | padding).all(axis=1)
        same += np.bincount(which[at], minlength=len(vocab))
    return list(zip(bad.tolist(), same.tolist(), strict=True))


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
        width = int(variable.shape[1]) if len(variable.shape) > 1 else 1
        if found.stacked:
            stack = [t for t in found.layouts if t.stacked_table_name == variable.owner]
            tables = [(t, initial.get((t.table_name, slot))) for t in stack]
            counts = _scan(source, variable.key, variable.shape[0], width, tables)
            ordered = sorted(tables, key=lambda t: t[0].sparse_core_shard_row_offset)
            for (layout, value), (bad, same) in zip(ordered, counts, strict=True):
                states.append(StateCheck(layout.table_name, slot, variable.name,
                                         layout.unsharded_shape[0], bad,
                                         same if value is not None else None, value))
        else:
            value = initial.get((variable.owner, slot))
            [(bad, same)] = _scan(source, variable.key, variable.shape[0], width, None, value)
            states.append(StateCheck(variable.owner, slot, variable.name, variable.shape[0],
                                     bad, same if value is not None else None, value))
    return VerifyReport(found, tuple(checks), differ, tuple(states),
                        restore_verdict(found.view(), expected))


def restore_verdict(found: CheckpointView, expected: CheckpointView) -> CheckpointReport:
    """What restoring the checkpoint ``found`` under the configuration ``expected`` does: a
    jax-tpu-embedding checkpoint into a jax-tpu-embedding model (Orbax's restore,
    ``jax_restore``), a TensorFlow one into a TensorFlow embedding (TensorFlow 2.21's,
    ``checkpoint_verdicts``); across the two, nothing reads the other's format."""
    if (found.kind == "jax") != (expected.kind == "jax"):
        theirs = "jax-tpu-embedding (Orbax)" if found.kind == "jax" else "TensorFlow"
        ours = "jax-tpu-embedding" if expected.kind == "jax" else "TensorFlow"
        return CheckpointReport("fails", "not_applicable", (), f"a {theirs} checkpoint: {ours} "
                                "does not read it; `tpuemb checkpoint reshard` writes one for "
                                "the configuration")
    if expected.kind == "jax":
        return jax_restore(found, expected)
    return checkpoint_verdicts(found, expected)


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

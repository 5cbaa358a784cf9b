"""The backward half of the compiled step, for the tables the numba engine runs in this process.

``Executor`` hands these functions the tables whose forward pass the compiled step made
(``TableDeduplication.compiled``: one partial, no quantization, no pipelining, a storage with
live arrays): first, per table (the tables on several threads), back-propagation's input check
(spec section 1) and either the rows' summed gradients (spec section 4, one pass over the
occurrences) or, for a summed gradient too large for the caches, the occurrences grouped by
touched row (``engines.numba.FusedStep.backprop`` chooses); then, once every table passed the
check, one fused update per table (spec section 6; from grouped occurrences it sums each row's
gradient itself, in occurrence order, with the same float32 result), returning the squared norm
of the change, which is the report's ``update_norm`` without another pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .optimizers import UpdateContext
from .plan import TablePlan

__all__ = ["backprop_tables", "update_table"]

F32 = np.float32


def _stacked(table: TablePlan, grads: Sequence[np.ndarray]) -> np.ndarray:
    """The activation gradients of the table's features, stacked in feature order."""
    stacked = [grads[f] for f in table.features]
    d_activations = (
        stacked[0] if len(stacked) == 1  # a lone feature's gradient: no copy
        else np.concatenate(stacked) if stacked
        else np.zeros((0, table.dimension), dtype=F32)
    )
    return np.ascontiguousarray(d_activations, dtype=F32)


def _backprop(
    fused: Any, table: TablePlan, record: Any, grads: Sequence[np.ndarray],
    empty_bags: Mapping[int, np.ndarray],
) -> tuple[Any, bool]:
    grad, finite = fused.backprop(_stacked(table, grads), record.sample, record.gains,
                                  record.inverse, record.unique_ids.shape[0])
    if isinstance(grad, np.ndarray):  # summed by a pass that checked only the rows it read
        for f in table.features:
            empty = empty_bags.get(f)  # the rows of empty bags: no pass reads them
            if empty is not None and not np.isfinite(grads[f][empty]).all():
                finite = False
    return grad, finite


def backprop_tables(
    fused: Any, tables: Sequence[TablePlan], records: Sequence[Any],
    grads: Sequence[np.ndarray], empty_bags: Mapping[int, np.ndarray],
) -> tuple[list[Any], bool]:
    """Per table, what ``update_table`` updates from (``fused.backprop``: the rows' summed
    gradients, or their occurrences grouped by row, ``numba_update.Occurrences``), and whether
    every gradient value of these tables was finite; the tables run on several threads
    (``fused.parallel``).

    ``records``: the tables' ``TableDeduplication``; ``empty_bags``: per feature index, its empty
    bags (their gradient rows are checked here when the pass summing the gradients did not read
    them).
    """
    results = fused.parallel([
        lambda table=table, record=record: _backprop(fused, table, record, grads, empty_bags)
        for table, record in zip(tables, records, strict=True)
    ]) if tables else []
    return [grad for grad, _ in results], all(finite for _, finite in results)


def update_table(
    fused: Any, storage: Any, table: TablePlan, record: Any, grad: Any, lr: np.float32,
    ctx: UpdateContext,
) -> float:
    """Spec sections 4 and 6 for ``table`` from ``grad`` (its ``backprop_tables`` result), in
    place in the storage's live arrays (every row for a non-lazy table); returns the squared
    Euclidean norm of the parameters' change."""
    params, slots = storage.local(table.name, record.unique_ids if table.lazy else None)
    return float(fused.update(table, params, slots, record.unique_ids, grad, lr, ctx))

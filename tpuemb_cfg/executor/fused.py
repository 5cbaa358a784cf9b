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

``Executor.step``, which has the gradients before the forward pass, runs the two halves at once
(``forward_backprop``): the forward pass of every table on the calling thread, reading each
occurrence's row by its id (no de-duplication needed), while another thread de-duplicates and
back-propagates (with one thread, the two in turn); the update, the only write to the tables,
comes after both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from tpuemb_cfg.base import numerics
from tpuemb_cfg.base.errors import InputError

from .batch import CheckedFeature
from .batch import key as batch_key
from .custom import custom_gains
from .engines import Engine
from .engines.base import CompiledStep
from .optimizers import UpdateContext
from .plan import Plan, TablePlan
from .storage import LiveArrays

__all__ = [
    "CompiledStep", "Deduplicated", "TableInput", "backprop_tables", "forward_backprop",
    "identity", "stacked", "table_input", "update_table",
]

F32 = np.float32


class Deduplicated(Protocol):
    """What back-propagation and the update read of a table's de-duplication record
    (``core.TableDeduplication``): per occurrence its gradient row, gain and position among the
    distinct ids, and the distinct ids."""

    @property
    def sample(self) -> np.ndarray: ...

    @property
    def gains(self) -> np.ndarray: ...

    @property
    def inverse(self) -> np.ndarray: ...

    @property
    def unique_ids(self) -> np.ndarray: ...


class TableInput(NamedTuple):
    """One table's occurrences in a step: its features' checked inputs and combiner gains, and
    the occurrences' ids, gains and gradient rows (``sample``) in the spec's reference order,
    their TensorCores (accumulation DISABLED) and the zero-denominator bags per feature."""

    feats: list[CheckedFeature]
    gains_list: list[np.ndarray]
    ids: np.ndarray
    gains: np.ndarray
    sample: np.ndarray
    cores: list[np.ndarray]
    zero_bags: dict[int, int]

    @classmethod
    def of(
        cls, feats: list[CheckedFeature], gains_list: list[np.ndarray], samples: list[np.ndarray],
        cores: list[np.ndarray], zero_bags: dict[int, int],
    ) -> TableInput:
        """The table's input from its features' (the occurrence arrays concatenated)."""
        ids, gains, sample = (
            (feats[0].ids, gains_list[0], samples[0]) if len(feats) == 1  # no copies
            else (np.concatenate([c.ids for c in feats]), np.concatenate(gains_list),
                  np.concatenate(samples)) if feats
            else (np.zeros(0, np.int64), np.zeros(0, F32), np.zeros(0, np.int64))
        )
        return cls(feats, gains_list, ids, gains, sample, cores, zero_bags)


_identity = np.zeros(0, dtype=np.int64)


def identity(n: int) -> np.ndarray:
    """``np.arange(n)`` (int64), read-only: a view of one array kept for every step (the bags of
    a feature with one id per bag, without writing a new array each step)."""
    global _identity
    if _identity.shape[0] < n:
        _identity = np.arange(max(n, 2 * _identity.shape[0]), dtype=np.int64)
        _identity.flags.writeable = False
    return _identity[:n]


def stacked(table: TablePlan, grads: Sequence[np.ndarray]) -> np.ndarray:
    """The activation gradients of the table's features (``check_gradient``'s C-contiguous
    float32 arrays), stacked in feature order."""
    arrays = [grads[f] for f in table.features]
    return (
        arrays[0] if len(arrays) == 1  # a lone feature's gradient: no copy
        else np.concatenate(arrays) if arrays
        else np.zeros((0, table.dimension), dtype=F32)
    )


def _backprop(
    fused: CompiledStep, table: TablePlan, record: Deduplicated, grads: Sequence[np.ndarray],
    empty_bags: Mapping[int, np.ndarray],
) -> tuple[Any, bool]:
    grad, finite = fused.backprop(stacked(table, grads), record.sample, record.gains,
                                  record.inverse, record.unique_ids.shape[0])
    if isinstance(grad, np.ndarray):  # summed by a pass that checked only the rows it read
        for f in table.features:
            empty = empty_bags.get(f)  # the rows of empty bags: no pass reads them
            if empty is not None and not np.isfinite(grads[f][empty]).all():
                finite = False
    return grad, finite


def backprop_tables(
    fused: CompiledStep, tables: Sequence[TablePlan], records: Sequence[Deduplicated],
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
    fused: CompiledStep, storage: LiveArrays, table: TablePlan, record: Deduplicated, grad: Any,
    lr: np.float32, ctx: UpdateContext,
) -> tuple[float, tuple[np.ndarray, ...] | None]:
    """Spec sections 4 and 6 for ``table`` from ``grad`` (its ``backprop_tables`` result), in
    place in the storage's live arrays (every row for a non-lazy table); returns the squared
    Euclidean norm of the parameters' change and, for a lazy table, the touched rows'
    parameters then slots before the update, as [rows, D] arrays that hold them only for the
    rows whose change is not finite (the update writes nothing else there; None for a non-lazy
    table): what a non-finite result is diagnosed from (``kept.KeptRows``)."""
    rows = record.unique_ids if table.lazy else None
    params, slots = storage.local(table.name, rows)
    kept = None if rows is None else tuple(
        np.empty((rows.shape[0], table.dimension), dtype=F32) for _ in range(1 + len(slots)))
    squared = numerics.total(fused.update(table, params, slots, record.unique_ids, grad, lr, ctx,
                                          kept))
    return squared, kept


def forward_backprop(
    fused: CompiledStep, storage: LiveArrays, tables: Sequence[TablePlan],
    inputs: Sequence[TableInput], grads: Sequence[np.ndarray], empty_bags: Mapping[int, np.ndarray],
    record: Callable[[TablePlan, TableInput, np.ndarray, np.ndarray], Any],
) -> tuple[dict[int, np.ndarray], list[Any], list[Any], bool]:
    """The forward pass and back-propagation of ``tables`` (every one compiled), at once.

    The calling thread forms every feature's activations from the live rows by id; another
    thread (``fused.alongside``) de-duplicates each table's ids, makes its record
    (``record(table, input, unique, inverse)``) and back-propagates (``_backprop``, with the
    input check). Neither writes a table (the forward pass only computes pending default rows,
    as a step's first read does), so a step refused afterwards leaves them as they were.
    Returns the activations by feature index, the records, what ``update_table`` updates from
    and whether every gradient value was finite.
    """

    # The rows the forward pass reads, pending defaults computed, before the other thread
    # starts: short compiled work that would otherwise wait for the interpreter lock while the
    # other thread's Python runs.
    live = [storage.live_params(table.name, given.ids, fused.missing_rows)
            for table, given in zip(tables, inputs, strict=True)]

    def forward() -> dict[int, np.ndarray]:
        activations: dict[int, np.ndarray] = {}
        for table, given, params in zip(tables, inputs, live, strict=True):
            for f, c, g in zip(table.features, given.feats, given.gains_list, strict=True):
                activations[f] = fused.lookup(params, c.ids, None, g, c.row_splits)
        return activations

    def backward() -> tuple[list[Any], list[tuple[Any, bool]]]:
        records: list[Any] = []
        results: list[tuple[Any, bool]] = []
        for table, given in zip(tables, inputs, strict=True):
            unique, inverse = fused.deduplicate(given.ids)
            records.append(record(table, given, unique, inverse))
            results.append(_backprop(fused, table, records[-1], grads, empty_bags))
        return records, results

    (records, results), activations = fused.alongside(backward, forward)
    return (activations, records, [grad for grad, _ in results],
            all(finite for _, finite in results))


def table_input(
    plan: Plan, engine: Engine, table: TablePlan, checked: list[CheckedFeature], step: int,
    source: str | None, empty_bags: dict[int, np.ndarray] | None,
) -> TableInput:
    """The occurrences of ``table`` in step ``step`` (``TableInput``). ``empty_bags`` (the
    compiled back-propagation's, None for a table it does not run): per feature, its empty
    bags, updated here."""
    feats = [checked[f] for f in table.features]
    gains_list: list[np.ndarray] = []
    samples: list[np.ndarray] = []
    cores: list[np.ndarray] = []
    zero_bags: dict[int, int] = {}
    offset = 0
    for f, c in zip(table.features, feats, strict=True):
        if empty_bags is not None:
            empty_bags.pop(f, None)
        if empty_bags is not None and not c.unit_bags:
            empty_bags[f] = np.flatnonzero(c.row_splits[1:] == c.row_splits[:-1])
        bag = (identity(c.batch) if c.unit_bags  # one id per bag
               else engine.bag_of_occurrence(c.row_splits))
        if plan.features[f].custom is not None:  # a CustomCombiner's probed gains
            gains_list.append(custom_gains(plan.features[f].custom, c.weights,
                                           c.row_splits))
            zero_bags[f] = 0
        elif plan.features[f].combiner == "sum":  # every scale is 1: w * 1 is w
            gains_list.append(c.weights)
            zero_bags[f] = 0
        else:
            scale, zero = engine.bag_scales(
                c.weights, c.row_splits, plan.features[f].combiner
            )
            gains_list.append(c.weights * scale[bag])
            zero_bags[f] = int(zero.sum())
        samples.append(bag + offset if offset else bag)
        if plan.updates and not table.accumulate:
            if c.batch % plan.num_cores:
                raise InputError(
                    f"feature {f} ({plan.features[f].name!r}) has {c.batch} bags, not "
                    f"divisible by num_tensor_cores = {plan.num_cores}: with gradient "
                    f"accumulation DISABLED on table {table.name!r} each core owns an "
                    "equal contiguous block of bags",
                    path=source, key=batch_key(step, f, "row_splits"),
                )
            cores.append(bag // max(c.batch // plan.num_cores, 1))
        offset += c.batch
    return TableInput.of(feats, gains_list, samples, cores, zero_bags)
